"""`tfdist advise`: which strategy should I use? Measured here, then one recommendation.

  tfdist advise [--model my_model.py] [--data my_data.py] [--workers N]
                [--devices_per_worker K] [--memory_per_device GB]

Measures only what it must, and never trains to convergence:
  1. in one fresh process with K devices (logical CPUs stand in for GPUs on
     a machine without any), the model's memory per replica, then, side by
     side, one device at --batch_size and at the largest global batch, and
     with K > 1 mirrored and central storage over the K devices, and, when the
     model does not fit --memory_per_device, its layers split over them with
     micro-batches (model parallelism);
  2. with N > 1 workers: a 2-worker cluster on this machine, for the step it
     runs, the per-step latency and the all-reduce bandwidth (unless
     --busbw_gbps and --latency_ms give the links of your network);
  3. the default job or --data: a 2-epoch run's share of time waiting for input.
About 30 s on 2 cores, 50 s with --workers 2 (the compute-bound convnet: 2
minutes). Then `tfdist.bench.advisor` ranks the ways by examples/s, measured
or predicted with the α-β model of `tfdist scale`, and says why, with the
batch, learning-rate, communication, memory and input settings.

--model is `cnn` (the default job's), `convnet`, `mlp` (see `tfdist scale`),
or your .py file / module defining model_fn().
"""

import dataclasses
import json
import os
import sys
import tempfile
import time
from typing import Optional

from absl import flags

from tfdist.cli import self_launch
from tfdist.cluster import ClusterSpec

_MODEL = flags.DEFINE_string("model", "cnn", "cnn, convnet, mlp, or a .py file / module "
                             "with model_fn().")
_DATA = flags.DEFINE_string("data", None, "Your data (as for tfdist train --data), to measure "
                            "how much of a step waits for input. The default job's digits "
                            "are measured with --model=cnn.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "Per-replica batch.", lower_bound=1)
_WORKERS = flags.DEFINE_integer("workers", 1, "Workers in your cluster.", lower_bound=1)
_DEVICES_PER_WORKER = flags.DEFINE_integer(
    "devices_per_worker", 0, "Devices per worker (0: this machine's GPUs, or with none, one "
    "logical CPU device per core standing in for them).", lower_bound=0)
_COLOCATED = flags.DEFINE_bool("colocated", True, "The workers are processes on this machine "
                               "(as tfdist launch starts them); --nocolocated: separate "
                               "machines like this one.")
_MEMORY_PER_DEVICE = flags.DEFINE_float("memory_per_device", None, "GB of memory per device "
                                        "(default: no limit).", lower_bound=0)
_BUSBW_GBPS = flags.DEFINE_float("busbw_gbps", None, "Your network's all-reduce bus bandwidth, "
                                 "GB/s (default: measured between 2 local workers).",
                                 lower_bound=0)
_LATENCY_MS = flags.DEFINE_float("latency_ms", None, "Your network's per-step latency on 2 "
                                 "workers, ms (default: measured between 2 local workers).",
                                 lower_bound=0)
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 1e-2, "Your one-replica learning rate, "
                                    "to scale.", lower_bound=0)
_MICRO_BATCHES = flags.DEFINE_integer("micro_batches", 0, "Model parallelism's micro-batches "
                                      "(0: twice the devices).", lower_bound=0)
_STEPS = flags.DEFINE_integer("steps", 20, "Steps per timed fit, at least (more when a fit "
                             "would take under half a second).", lower_bound=5)
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed fits per way, interleaved (the fastest "
                                "counts).", lower_bound=1)
_TIMEOUT = flags.DEFINE_float("timeout", 300, "Seconds allowed per measuring process.",
                              lower_bound=1)
_CHECK = flags.DEFINE_bool("check", False, "Also time every way considered in fits "
                           "--check_longer times as long, in the same processes and rounds "
                           "as the advice's, and show whether the pick is the fastest "
                           "(within 5%) and each examples/s within 15% of the advice's. "
                           "A benchmark: minutes.")
_CHECK_LONGER = flags.DEFINE_integer("check_longer", 4, "--check: how many times longer the "
                                     "check's fits are than the advice's.", lower_bound=1)
_OUTPUT = flags.DEFINE_string("output", None, "Write the advice and measurements as JSON here.")
_MEASURE = flags.DEFINE_bool("measure", False, "Internal: time the local ways in this process.")
_DEVICES = flags.DEFINE_integer("devices", 1, "Internal: logical devices of this process.",
                                lower_bound=1)
_WORKER_RESULT = flags.DEFINE_string(self_launch.RESULT_FLAG, None,
                                     "Internal: the measuring process writes here.")


def main(argv):
  del argv
  if _MEASURE.value:  # One process of ours, given --worker_result too.
    return _measure_here()
  if self_launch.launched_by_itself(_WORKER_RESULT.value):
    return _worker()
  from tfdist.bench import advisor
  from tfdist.bench import memory
  try:
    _model_fn()  # A bad --model fails here, before any measuring.
  except ValueError as e:
    print(f"tfdist advise: {e}", file=sys.stderr)
    return 2
  start = time.monotonic()
  devices = _DEVICES_PER_WORKER.value or _local_devices()
  cluster = advisor.Cluster(
      workers=_WORKERS.value, devices_per_worker=devices, colocated=_COLOCATED.value,
      memory_per_device=(None if _MEMORY_PER_DEVICE.value is None
                         else _MEMORY_PER_DEVICE.value * 2**30))
  print(f"measuring {_MODEL.value} at batch {_BATCH_SIZE.value} per replica for "
        f"{cluster.workers} worker(s) x {devices} device(s)...", flush=True)
  micro_batches = _MICRO_BATCHES.value or 2 * devices
  local = _measure_local(devices, micro_batches)
  if local is None:
    return 1
  steps, footprint = local["seconds"]["step"], memory.Footprint(**local["footprint"])
  links, two = None, None
  if cluster.workers > 1:
    if _BUSBW_GBPS.value is None or _LATENCY_MS.value is None or _COLOCATED.value:
      two = _measure_two_workers(devices)
      if two is None:
        return 1
    links = _links(two)
  input_share = _input_share()
  measurements = advisor.Measurements(
      batch_size=_BATCH_SIZE.value, footprint=footprint, step=steps, links=links,
      input_share=input_share, micro_batches=micro_batches, peak=local["peak"])
  advice = advisor.decide(measurements, cluster, learning_rate=_LEARNING_RATE.value)
  seconds = time.monotonic() - start
  print(f"\n{advice}\n\nmeasured in {seconds:.0f} s.")
  out = {"advice": advice.as_dict(), "cluster": dataclasses.asdict(cluster),
         "measurements": dataclasses.asdict(measurements), "seconds": seconds}
  if _CHECK.value:
    check = _check(advice, cluster, local["seconds"]["check"], two)
    out["check"] = dataclasses.asdict(check)
    print(f"\n{check}")
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump(out, f, indent=1)
  return 0


def _check(advice, cluster, local: dict, two: Optional[dict]):
  """The advice against the longer fits timed beside its own (see --check).

  Only what runs here: the workers' way when the cluster is 2 workers on this
  machine, which `main` always measures (a prediction for other clusters has
  nothing here to hold it to).
  """
  from tfdist.bench import advisor
  measured = {}
  for option in advice.options:
    if option.name == "multi_worker_mirrored":
      if cluster.workers != 2 or not cluster.colocated:
        continue
      step = two["synced_check"]
    else:
      step = local[_way(option.name)]
    measured[option.name] = option.global_batch / step
  return advisor.check(advice, measured)


def _way(option_name: str) -> str:
  """The way `candidates` timed for an option of the advice."""
  return "model_parallel" if option_name.startswith("model_parallel") else option_name


def _check_longer() -> int:
  """How many times longer the measuring processes time the check's fits (0: no check)."""
  return _CHECK_LONGER.value if _CHECK.value else 0


def _local_devices() -> int:
  """This machine's GPUs, or one logical CPU per core standing in for them."""
  import tensorflow as tf  # Only lists devices: the runtime of this process is not used.
  return len(tf.config.list_physical_devices("GPU")) or (os.cpu_count() or 1)


def _measure_local(devices: int, micro_batches: int):
  """Every way on this machine's devices, in one fresh process (see `_measure_here`)."""
  print(f"  timing the ways on {devices} device(s), side by side...", flush=True)
  return self_launch.run_process_for_result(
      "advise", sys.modules[__name__], timeout=_TIMEOUT.value,
      extra_flags=["--measure", f"--devices={devices}", f"--micro_batches={micro_batches}"])


def _measure_two_workers(devices: int):
  print("  timing 2 workers on this machine...", flush=True)
  return self_launch.run_for_result("advise", sys.modules[__name__], ClusterSpec.local(2),
                                    timeout=_TIMEOUT.value, extra_flags=[f"--devices={devices}"])


def _links(two: Optional[dict]):
  """The links of the cluster: the network's given, else measured on `two` local workers."""
  from tfdist.bench import advisor
  from tfdist.bench import scaling_model
  if _BUSBW_GBPS.value is not None:
    busbw = _BUSBW_GBPS.value * 1e9
  else:
    busbw = two["busbw"]
  if _LATENCY_MS.value is not None:
    latency = _LATENCY_MS.value / 1000
  else:
    latency = scaling_model.latency_seconds(two["synced_tiny"] - two["plain_tiny"],
                                            two["gradient_bytes"], two["busbw"])
  return advisor.Links(busbw=busbw, latency=latency,
                       two_workers=None if two is None else two["synced"])


def _input_share():
  """The share of a step waiting for input: a 2-epoch `tfdist train` on one device."""
  if _DATA.value is None and _MODEL.value != "cnn":
    return None
  from tfdist.cli import train_process
  extra = [] if _DATA.value is None else [f"--data={_DATA.value}", f"--model={_MODEL.value}"]
  print("  timing the input pipeline (2 epochs on one device)...", flush=True)
  with tempfile.TemporaryDirectory() as workdir:
    result = train_process.run("one_device", workdir, keras="tf_keras", epochs=2,
                               batch_size=_BATCH_SIZE.value, timeout=_TIMEOUT.value,
                               extra_flags=extra)
  if "error" in result:
    print("  input not measured: tfdist train failed:\n    " + "\n    ".join(result["log_tail"]),
          file=sys.stderr)
    return None
  return result["input_bound"]


def _model_fn():
  from tfdist.cli import user_code
  return user_code.benchmark_model_fn(_MODEL.value)


def _split_devices() -> None:
  if _DEVICES.value > 1:
    from tfdist import devices
    devices.split_physical_device(_DEVICES.value)  # Before TensorFlow starts.


def _measure_here() -> int:
  """In the measuring process: the model's memory, then every local way, interleaved."""
  from tfdist.bench import advisor
  from tfdist.bench import candidates
  from tfdist.bench import memory
  _split_devices()
  batch, devices = _BATCH_SIZE.value, _DEVICES.value
  footprint = memory.footprint(candidates.compiled(_model_fn()), batch)
  ways = {"one_device": ("one_device", batch)}
  largest = _WORKERS.value * devices
  if largest > 1:
    ways[advisor.ONE_DEVICE_LARGE] = ("one_device", batch * largest)
  if devices > 1:
    ways.update({name: (name, batch) for name in ("mirrored", "central_storage")})
    limit = _MEMORY_PER_DEVICE.value
    if limit is not None and footprint.total > limit * 2**30:
      ways["model_parallel"] = ("model_parallel", batch)
  seconds = candidates.time_ways(_model_fn(), ways, steps=_STEPS.value, repeats=_REPEATS.value,
                                 micro_batches=_MICRO_BATCHES.value or 1,
                                 longer=_check_longer())
  self_launch.write_result(_WORKER_RESULT.value, {
      "seconds": seconds, "footprint": footprint.as_dict(), "peak": memory.peak_bytes()})
  return 0


def _worker() -> int:
  import tfdist
  from tfdist.bench import candidates
  from tfdist.bench import scale
  _split_devices()
  spec = ClusterSpec.from_env()
  strategy = tfdist.make_strategy("multi_worker_mirrored", communication="ring")
  # Unpinned, as `tfdist train` runs workers: each shares this machine's cores.
  # Not less than 50 steps, nor fits shorter than the local ways': a fit's
  # first steps and its end weigh less in a long fit (in one run, the default
  # CNN's 50-step fits measured 4.6 ms a step against 3.8 ms in 200-step ones).
  result = scale.measure_worker(strategy, _model_fn(), batch_size=_BATCH_SIZE.value,
                                steps=max(50, _STEPS.value), repeats=_REPEATS.value,
                                compress_gradients=False, seed=spec.task.index, raw=False,
                                longer=_check_longer(),
                                min_fit_seconds=candidates.MIN_FIT_SECONDS)
  self_launch.write_result(_WORKER_RESULT.value, result)
  return 0
