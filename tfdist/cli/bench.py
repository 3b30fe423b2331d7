"""`tfdist bench`: tfdist against raw TensorFlow, measured side by side in one run.

Suites (--suites):
  overhead     fit step time, tfdist strategy / raw tf.distribute strategy, for a
               CNN and an MLP under one_device, mirrored and central_storage
               (2 logical CPUs), by wall time and by CPU time;
  small_model  the MLP under mirrored over 2 logical CPUs / no strategy, with
               Keras defaults (raw) and with tfdist's steps_per_execution;
  allreduce    2 local multi_worker_mirrored workers (RING): bus bandwidth of
               one all-reduce of 1-64 MB of 1 MB gradients, as TF's defaults
               send it (raw), in tfdist's 4 MB packs, and in packs with float16
               on the wire (compress_gradients), divided by loopback TCP
               bandwidth measured in the same cluster;
  scaling      `tfdist scale` for a compute-bound CNN and a communication-bound
               MLP (--scale_models): examples/s on 1 and 2 workers pinned to a
               core each, measured and predicted efficiency;
  advise       `tfdist advise --workers 2 --check` per --advise_cases: the
               advisor's pick against every way it considered, each timed again
               in 4x longer fits beside the advice's own (pick within 5% of the
               fastest, examples/s within 15%);
  serving      a SavedModel (--serving_model, default: the default job's CNN
               through tfdist.export) behind TensorFlow's batching op and a
               loopback HTTP server, in 1 and 2 processes, under concurrent
               clients: p50/p99 latency and requests/s for every
               max_batch_size x batch_timeout_micros, beside a trivial model
               (its input back: the HTTP and JSON overhead); with
               --latency_target_ms, the fastest setting whose p99 meets it,
               written as TF Serving's batching file (--batching_parameters_out).

Prints a table per suite and, with --output, writes JSON with one key per
ratio. Medians over --repeats interleaved pairs. Fails on speed only where
asked to: with --latency_target_ms, the serving suite exits 1 when no setting
meets the target (after writing --output).
"""

import json
import subprocess
import sys

from absl import flags

from tfdist import _choices as choices
from tfdist import output
from tfdist.cli import self_launch
from tfdist.task import _result_channel as result_channel

_ALL_SUITES = ["overhead", "small_model", "allreduce", "scaling", "advise", "serving"]
_SUITES = flags.DEFINE_list("suites", _ALL_SUITES, "What to measure: any of "
                            f"{', '.join(_ALL_SUITES)}.")


@flags.validator("suites")
def _check_suites(names) -> bool:
  unknown = [name for name in names if name not in _ALL_SUITES]
  if unknown or not names:
    raise flags.ValidationError(f"--suites takes any of {_ALL_SUITES}, comma-separated. "
                                f"Received: {names!r}")
  return True


_REPEATS = flags.DEFINE_integer("repeats", 21, "Interleaved repeats per comparison.",
                                lower_bound=1)
_STEPS = flags.DEFINE_integer("steps", 100, "Steps per timed fit.", lower_bound=10)
_SIZES_MB = flags.DEFINE_list("sizes_mb", ["1", "4", "16", "64"], "All-reduce sizes in MB.")
_SCALE_MODELS = flags.DEFINE_list("scale_models", ["convnet:256", "mlp:64"],
                                  "scaling: `tfdist scale` models as model:per-replica batch.")


@flags.validator("scale_models")
def _check_scale_models(entries) -> bool:
  for entry in entries:
    if not entry.partition(":")[2].isdigit():
      # Checked when flags are parsed, before any suite runs.
      raise flags.ValidationError("--scale_models takes model:per-replica batch, e.g. "
                                  f"convnet:256. Received: {entry!r}")
  return True


_ADVISE_CASES = flags.DEFINE_list(
    "advise_cases", ["cnn:64", "mlp:64", "convnet:64", "mlp:64:0.008"],
    "advise: model:per-replica batch[:memory per device, GB]; the default job's CNN, the "
    "communication-bound MLP, the compute-bound convnet, and the MLP made too big for a "
    "device.")


@flags.validator("advise_cases")
def _check_advise_cases(entries) -> bool:
  for entry in entries:
    parts = entry.split(":")
    if not 2 <= len(parts) <= 3 or not parts[1].isdigit():
      raise flags.ValidationError("--advise_cases takes model:per-replica batch[:GB], e.g. "
                                  f"mlp:64:0.008. Received: {entry!r}")
  return True


_SCALE_PAIRS = flags.DEFINE_integer("scale_pairs", 3, "scaling: alternated 1- and 2-worker "
                                    "runs per model (tfdist scale --pairs).", lower_bound=1)
_SCALE_STEPS = flags.DEFINE_integer("scale_steps", 15, "scaling: steps per timed fit.",
                                    lower_bound=5)
_SERVING_MODEL = flags.DEFINE_string(
    "serving_model", None, "serving: a SavedModel version folder (tfdist.export's); default: "
    "the default job's CNN, exported to a temporary folder.")
_SERVING_MAX_BATCH_SIZES = flags.DEFINE_list("serving_max_batch_sizes", ["8", "32"],
                                             "serving: max_batch_size values to measure.")
_SERVING_TIMEOUTS = flags.DEFINE_list("serving_batch_timeouts_micros", ["0", "2000", "10000"],
                                      "serving: batch_timeout_micros values to measure.")
_SERVING_PROCESSES = flags.DEFINE_list("serving_processes", ["1", "2"],
                                       "serving: numbers of server processes to measure.")
_SERVING_CLIENTS = flags.DEFINE_list("serving_clients", ["2", "16"],
                                     "serving: numbers of concurrent clients (light and heavy "
                                     "load); the target is met under the largest.")
_SERVING_REQUESTS = flags.DEFINE_integer("serving_requests", 400, "serving: requests per "
                                         "measured cell.", lower_bound=10)
_SERVING_BATCH_THREADS = flags.DEFINE_integer("serving_batch_threads", 1, "serving: "
                                              "num_batch_threads of each server process.",
                                              lower_bound=1)
_LATENCY_TARGET_MS = flags.DEFINE_float("latency_target_ms", None, "serving: the p99 latency "
                                        "the chosen batching setting must meet.")


@flags.validator("latency_target_ms")
def _check_latency_target(value) -> bool:
  if value is not None and value <= 0:
    # Checked when flags are parsed, before the serving suite measures for minutes.
    raise flags.ValidationError("--latency_target_ms must be > 0 (a p99 latency in "
                                f"milliseconds). Received: {value:g}")
  return True


_BATCHING_PARAMETERS_OUT = flags.DEFINE_string(
    "batching_parameters_out", None, "serving: write the chosen setting here as TF Serving's "
    "--batching_parameters_file (needs --latency_target_ms).")


@flags.multi_flags_validator(["latency_target_ms", "batching_parameters_out"],
                             message="--batching_parameters_out needs --latency_target_ms "
                             "(the p99 latency the written setting must meet).")
def _check_batching_out(values) -> bool:
  return not values["batching_parameters_out"] or values["latency_target_ms"] is not None


@flags.multi_flags_validator(
    ["serving_max_batch_sizes", "serving_batch_timeouts_micros", "serving_processes",
     "serving_clients"])
def _check_serving_lists(values) -> bool:
  for name, entries in values.items():
    low = 0 if name == "serving_batch_timeouts_micros" else 1
    if not entries or not all(e.isdigit() and int(e) >= low for e in entries):
      raise flags.ValidationError(f"--{name} takes integers >= {low}, e.g. 8,32. "
                                  f"Received: {entries!r}")
  return True


_OUTPUT = flags.DEFINE_string("output", None, "Write the results as JSON here.")
_RESULT_FILE = flags.DEFINE_string(self_launch.RESULT_FLAG, None, "Internal: the "
                                   "all-reduce worker writes its rows here.")


def normalize_argv(argv):
  """A repeated --suites adds to the list, as it did before it took commas.

  absl keeps a list flag's last value alone: the repeats are joined into one.
  """
  suites, rest = [], []
  arguments = iter(argv)
  for argument in arguments:
    if argument == "--":  # What follows is no flag of bench's.
      rest += [argument, *arguments]
    elif argument.startswith("--suites="):
      suites.append(argument[len("--suites="):])
    elif argument == "--suites":
      suites.append(next(arguments, ""))
    else:
      rest.append(argument)
  return ([f"--suites={','.join(suites)}"] if suites else []) + rest


def main(argv):
  del argv
  if self_launch.launched_by_itself(_RESULT_FILE.value):
    return _all_reduce_worker()
  from tfdist import devices
  devices.split_physical_device(2)  # Before TensorFlow starts: two "GPUs".
  asked = [suite for suite in _ALL_SUITES if suite in _SUITES.value]
  stages = output.Stages(len(asked))
  results, code = {}, 0
  for suite in asked:
    print(f"\n{stages.next(f'suite {suite}')}", flush=True)
    found = _RUNS[suite]()
    if suite == "serving":  # Its targets, checked: the exit code.
      found, code = found
    results.update(found)
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump(results, f, indent=1, sort_keys=True)
    print(f"\nwrote {_OUTPUT.value}")
  return code


def _overhead() -> dict:
  from tfdist.training import timing
  from tfdist._lab import overhead
  rows = overhead.strategy_overhead(choices.strategy_names(choices.SINGLE_MACHINE),
                                    ["cnn", "mlp"], _REPEATS.value, steps=_STEPS.value)
  print("\nOverhead: model.fit step time, tfdist strategy / raw tf.distribute; judged by "
        "CPU time, the steady clock here (target <= 1.01)")
  print(f"{'model':<6} {'strategy':<16} {'raw ms':>8} {'tfdist ms':>10} {'wall':>7} "
        f"{'raw cpu ms':>11} {'tfdist cpu ms':>14} {'cpu':>7}")
  results = {}
  for row in rows:
    wall, cpu = row["wall"], row["cpu"]
    print(f"{row['model']:<6} {row['strategy']:<16} {wall['a_ms']:>8.2f} "
          f"{wall['b_ms']:>10.2f} {wall['ratio']:>7.3f} {cpu['a_ms']:>11.2f} "
          f"{cpu['b_ms']:>14.2f} {cpu['ratio']:>7.3f}")
    for name in timing.CLOCKS:
      results[f"overhead_{row['model']}_{row['strategy']}_{name}"] = row[name]["ratio"]
  return results


def _small_model() -> dict:
  from tfdist.training import timing
  from tfdist._lab import overhead
  small = overhead.small_model_overhead(_REPEATS.value, steps=_STEPS.value)
  plain = small["raw"]["wall"]["a_ms"]
  print(f"\nSmall model: MLP 784-512-512-10, batch 64, mirrored over {small['replicas']} "
        f"logical CPUs / no strategy ({plain:.2f} ms/step); target <= 1.15")
  print(f"  {'':<40} {'wall':>6} {'cpu':>6}")
  results = {}
  for variant, label in [("raw", "raw tf.distribute, Keras defaults"),
                         ("tfdist", "tfdist, steps_per_execution=10")]:
    print(f"  {label:<40} {small[variant]['wall']['ratio']:>5.2f}x "
          f"{small[variant]['cpu']['ratio']:>5.2f}x")
    for name in timing.CLOCKS:
      results[f"small_model_{variant}_mirrored_over_plain_{name}"] = (
          small[variant][name]["ratio"])
  return results


def _all_reduce() -> dict:
  from tfdist.cluster import ClusterSpec
  measured = self_launch.run_for_result("bench", sys.modules[__name__],
                                        ClusterSpec.local(workers=2), timeout=900)
  if measured is None:
    print("\nAll-reduce: the 2-worker cluster failed; see the line above.")
    return {}
  tcp = measured["loopback_bytes_per_second"]
  print(f"\nAll-reduce: 2 workers, RING, gradients as 1 MB tensors; bus bandwidth / loopback "
        f"TCP ({tcp / 1e9:.2f} GB/s, Python sockets, same network). raw = TF's defaults "
        "(one all-reduce), tfdist = 4 MB packs, tfdist_fp16 = and compress_gradients "
        "(target >= 0.30). busbw counts the float32 gradient bytes reduced (for fp16: the "
        "effective gradient bandwidth); wire busbw counts the bytes sent.")
  print(f"{'size':>6} {'variant':>12} {'ms':>8} {'algbw GB/s':>11} {'busbw GB/s':>11} "
        f"{'/ TCP':>7} {'wire busbw':>11} {'/ TCP':>7}")
  results = {"allreduce_loopback_gbps": tcp / 1e9}
  for row in measured["rows"]:
    ratio, wire = row["busbw"] / tcp, row["wire_busbw"] / tcp
    print(f"{row['size_mb']:>4g}MB {row['variant']:>12} {1000 * row['seconds']:>8.1f} "
          f"{row['algbw'] / 1e9:>11.3f} {row['busbw'] / 1e9:>11.3f} {ratio:>7.3f} "
          f"{row['wire_busbw'] / 1e9:>11.3f} {wire:>7.3f}")
    results[f"allreduce_busbw_over_tcp_{row['variant']}_{row['size_mb']:g}mb"] = ratio
    results[f"allreduce_wire_busbw_over_tcp_{row['variant']}_{row['size_mb']:g}mb"] = wire
  return results


def _scaling() -> dict:
  results, rows = {}, []
  for entry in _SCALE_MODELS.value:
    model, _, batch = entry.partition(":")
    print(f"\nScaling: tfdist scale --model={model} --per_replica_batch_size={batch} ...",
          flush=True)
    code, measured = result_channel.run_for_json(lambda path: subprocess.run(
        [sys.executable, "-m", "tfdist", "scale", f"--model={model}",
         f"--per_replica_batch_size={batch}",
         f"--steps={_SCALE_STEPS.value}", f"--pairs={_SCALE_PAIRS.value}", "--plot=",
         f"--output={path}"],
        stdout=subprocess.DEVNULL, timeout=3600).returncode)
    if measured is None:
      print(f"  failed (exit code {code}); run the command above to see why.")
      continue
    batch = measured["per_replica_batch_size"]
    one = batch / measured["compute_seconds"]
    two = 2 * batch / measured["two_worker_seconds"]
    rows.append((model, batch, one, two, measured))
    prefix = f"scaling_{model}"
    results.update({f"{prefix}_examples_per_second_1": one,
                    f"{prefix}_examples_per_second_2": two,
                    f"{prefix}_efficiency_2_measured": measured["measured_efficiency_2"],
                    f"{prefix}_efficiency_2_predicted": measured["predicted_efficiency_2"],
                    f"{prefix}_efficiency_2_raw": measured["raw_measured_efficiency_2"],
                    f"{prefix}_sync_ratio": measured["sync_ratio"],
                    f"{prefix}_collectives_per_step_raw": measured["collectives_per_step"]["raw"],
                    f"{prefix}_collectives_per_step_tfdist":
                        measured["collectives_per_step"]["tfdist"]})
  print("\nScaling: 2 workers / 1, each pinned to a core, same per-replica batch "
        "(target >= 95% for the compute-bound CNN, never below raw); raw tf_keras's "
        "step timed in the same rounds; collectives one step launches, raw / tfdist; "
        "sync: a step's communication / one all-reduce of its gradients (target <= 1.5)")
  print(f"{'model':<10} {'batch':>6} {'1 worker ex/s':>14} {'2 workers ex/s':>15} "
        f"{'efficiency':>11} {'raw':>5} {'predicted':>10} {'collectives':>12} {'sync':>5}")
  for model, batch, one, two, measured in rows:
    counts = measured["collectives_per_step"]
    print(f"{model:<10} {batch:>6} {one:>14.0f} {two:>15.0f} "
          f"{measured['measured_efficiency_2']:>10.0%} "
          f"{measured['raw_measured_efficiency_2']:>5.0%} "
          f"{measured['predicted_efficiency_2']:>10.0%}"
          f" {counts['raw']:>6} / {counts['tfdist']:<3} {measured['sync_ratio']:>5.1f}")
  return results


def _advise() -> dict:
  results, rows = {}, []
  from tfdist.advice import _advice as advice
  for entry in _ADVISE_CASES.value:
    model, batch, *memory = entry.split(":")
    options = {"batch_size": int(batch), "workers": 2, "check": True}
    if memory:
      options["memory_per_device_gb"] = float(memory[0])
    print(f"\nAdvise: {model} {options} ...", flush=True)
    try:
      out = advice.advise(model, **options).as_dict()
    except (ValueError, advice.MeasurementError) as e:
      print(f"  failed: {e}")
      continue
    check = out["check"]
    worst_way = max(check["errors"], key=lambda way: abs(check["errors"][way]))
    worst = abs(check["errors"][worst_way])
    pick = check["pick"] or "nothing fits"
    # The target is the pick's prediction; every way's is shown too.
    pick_error = abs(check["errors"][check["pick"]]) if check["pick"] in check["errors"] \
        else None
    rows.append((entry, pick, check["fastest"], check["pick_share"], pick_error, worst,
                 worst_way, out["seconds"]))
    case = entry.replace(":", "_").replace(".", "")
    results.update({f"advise_{case}_pick_share_of_fastest": check["pick_share"],
                    f"advise_{case}_pick_prediction_error": pick_error,
                    f"advise_{case}_worst_prediction_error": worst,
                    f"advise_{case}_seconds_with_check": out["seconds"]})
    results.update({f"advise_{case}_prediction_error_{way}": error
                    for way, error in check["errors"].items()})
  print("\nAdvise: 2 workers x 2 logical CPUs on this machine; the pick's measured examples/s "
        "/ the fastest's (target >= 95%), the pick's |advised - measured| / measured "
        "examples/s (target <= 15%), the worst of any way it ranked, and the seconds it took "
        "(the check's longer fits included: they run in the advice's own processes)")
  print(f"{'case':<14} {'pick':<44} {'fastest measured':<44} {'share':>6} {'error':>6} "
        f"{'worst':>6} {'worst way':<28} {'seconds':>9}")
  for entry, pick, fastest, share, pick_error, worst, worst_way, seconds in rows:
    shown = "-" if share is None else f"{share:.0%}"
    error = "-" if pick_error is None else f"{pick_error:.0%}"
    print(f"{entry:<14} {pick:<44} {fastest:<44} {shown:>6} {error:>6} {worst:>6.0%} "
          f"{worst_way:<28} {seconds:>9.0f}")
  return results


def _serving():
  """The serving suite: its results, and 1 when the latency target was not met."""
  import tempfile
  from tfdist import serving
  scratch = tempfile.TemporaryDirectory(prefix="tfdist-bench-serving-")
  with scratch:
    path = _SERVING_MODEL.value
    if not path:
      import tfdist
      from tfdist.training import job
      path = tfdist.export(job.small_cnn(), scratch.name)
    settings = [serving.Batching(int(size), int(timeout),
                                 num_batch_threads=_SERVING_BATCH_THREADS.value)
                for size in _SERVING_MAX_BATCH_SIZES.value
                for timeout in _SERVING_TIMEOUTS.value]
    processes = [int(n) for n in _SERVING_PROCESSES.value]
    clients = [int(n) for n in _SERVING_CLIENTS.value]
    print(f"\nServing: {path} and a trivial model behind TensorFlow's batching op, "
          f"{len(settings)} settings x processes {processes} x clients {clients} ...",
          flush=True)
    rows = serving.measure_serving({"model": path}, settings, processes=processes,
                                   clients=clients, requests=_SERVING_REQUESTS.value)
  print("\nServing: client-side latency and throughput, closed-loop clients on this machine "
        "(noisy, shared); batch = the mean rows of the batches that served a request; "
        "trivial = a model returning its input, served the same way")
  print(serving.serving_table(rows))
  results = {}
  try:
    overhead = serving.trivial_overhead(rows, "model")
  except ValueError:  # Every cell had errors (see the table): the rest is still written.
    print("The trivial model's p50 / the model's: not measured, no setting served both "
          "without errors (see the errors column).")
  else:
    print(f"The trivial model's p50 / the model's, median over the cells: "
          f"{overhead['p50_share']:.0%} ({overhead['trivial_p50_ms']:.1f} of "
          f"{overhead['model_p50_ms']:.1f} ms): the rest is the model.")
    results["serving_trivial_p50_share"] = overhead["p50_share"]
  for row in rows:
    key = (f"serving_{row.model}_{row.processes}p_{row.clients}c_"
           f"{row.batching.max_batch_size}x{row.batching.batch_timeout_micros}")
    results.update({f"{key}_p50_ms": row.load.p50_ms, f"{key}_p99_ms": row.load.p99_ms,
                    f"{key}_requests_per_second": row.load.requests_per_second,
                    f"{key}_mean_batch_rows": row.load.mean_batch_rows})
  if _LATENCY_TARGET_MS.value is None:
    return results, 0
  try:
    best = serving.choose_batching(rows, _LATENCY_TARGET_MS.value)
  except ValueError as e:
    print(f"\nServing: {e}", file=sys.stderr)
    return results, 1
  print(f"\nServing: p99 <= {_LATENCY_TARGET_MS.value:g} ms under {best.clients} clients at "
        f"the most requests/s: max_batch_size={best.batching.max_batch_size}, "
        f"batch_timeout_micros={best.batching.batch_timeout_micros} with {best.processes} "
        f"process(es): p99 {best.load.p99_ms:.2f} ms, {best.load.requests_per_second:.0f} "
        "requests/s")
  text = serving.batching_parameters_text(best.batching)
  if _BATCHING_PARAMETERS_OUT.value:
    with open(_BATCHING_PARAMETERS_OUT.value, "w") as f:
      f.write(text)
    print(f"wrote {_BATCHING_PARAMETERS_OUT.value} (tensorflow_model_server --enable_batching "
          f"--batching_parameters_file={_BATCHING_PARAMETERS_OUT.value}):")
  print(text, end="")
  results["serving_chosen_p99_ms"] = best.load.p99_ms
  results["serving_chosen_requests_per_second"] = best.load.requests_per_second
  return results, 0


def _all_reduce_worker() -> int:
  import tfdist
  # TF's pack size: the variants set their own per call (see all_reduce_seconds).
  strategy = tfdist.make_strategy(choices.Name.MULTI_WORKER_MIRRORED, communication="ring",
                                  bytes_per_pack=0)
  from tfdist._lab import allreduce
  from tfdist.cluster import ClusterSpec
  spec = ClusterSpec.from_env()
  first = spec.task.index == 0
  # Worker 0 measures TCP first; worker 1 meanwhile waits in the first all-reduce.
  tcp = allreduce.loopback_bandwidth() if first else None
  rows = []
  wires = {v.name: v.wire for v in allreduce.ALL_REDUCE_VARIANTS}
  for size in [float(s) for s in _SIZES_MB.value]:
    seconds = allreduce.all_reduce_seconds(strategy, allreduce.gradient_sizes(size * allreduce.MB),
                                           allreduce.ALL_REDUCE_VARIANTS, _REPEATS.value)
    for variant, t in seconds.items():
      rows.append({"size_mb": size, "variant": variant, "seconds": t,
                   **allreduce.bus_bandwidth(size * allreduce.MB, t,
                                             strategy.num_replicas_in_sync, wires[variant])})
  self_launch.write_result(_RESULT_FILE.value, {"loopback_bytes_per_second": tcp,
                                                  "rows": rows})
  return 0


# Each suite (run in _ALL_SUITES' order): a dict of results ("serving": and its exit code).
_RUNS = {"overhead": _overhead, "small_model": _small_model, "allreduce": _all_reduce,
         "scaling": _scaling, "advise": _advise, "serving": _serving}
