"""`tfdist compare`: the same model under every strategy, back to back, one table.

Each strategy runs in a fresh `tfdist train` process (a fresh TF runtime, as
multi_worker_mirrored needs), on 2 logical CPU devices for the single-machine
strategies, a local 2-worker cluster for multi_worker_mirrored, and chief +
2 workers + 1 ps for parameter_server. `--keras=tf_keras,keras3` runs the
table for both Kerases. Exit code 1 if any strategy fails or misses the first
strategy's accuracy (with the same Keras) by more than --tolerance.

`--sync_every=1,4,16` adds rows of multi_worker_mirrored trained with local SGD
and with DiLoCo at each of those sync intervals (`tfdist train --sync_every`),
and `--thread_share` a row of multi_worker_mirrored whose tasks keep
TensorFlow's own thread pools, beside the row where the local launcher gives
each task its share of the cores (`tfdist.launch`'s default).
"""

import json
import sys
import tempfile
import time

from absl import flags

from tfdist import _choices as choices
from tfdist import _keras_support as keras_support
from tfdist import output
from tfdist.cli import _train_process as train_process
from tfdist.task import _keras as task_keras

_STRATEGIES = flags.DEFINE_list(
    "strategies", choices.strategy_names(choices.SINGLE_MACHINE, choices.COLLECTIVE,
                                         choices.PARAMETER_SERVER),
    "Strategies to compare; the first is the baseline.")
_KERAS = flags.DEFINE_list(
    "keras", None, "The Kerases to train the default model with, each under every strategy: "
    f"any of {list(task_keras.KERAS_CHOICES)} (default: tf_keras where it is installed, else "
    "keras3).")
_EPOCHS = flags.DEFINE_integer("epochs", 15, "Epochs per strategy.", lower_bound=1)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "Global batch size.", lower_bound=1)
_TOLERANCE = flags.DEFINE_float("tolerance", 0.05, "Largest accuracy gap to the baseline "
                                "(absolute) that still passes.", lower_bound=0)
_TIMEOUT = flags.DEFINE_float("timeout", 600, "Seconds allowed per strategy.", lower_bound=1)
_OUTPUT = flags.DEFINE_string("output", None, "Write all results as JSON here.")
_SYNC_EVERY = flags.DEFINE_list(
    "sync_every", [], "Sync intervals H: for each, multi_worker_mirrored with local SGD "
    "(tfdist train --sync_every=H) and with DiLoCo (--outer_optimizer=nesterov), beside the "
    "strategies.")
_THREAD_SHARE = flags.DEFINE_bool(
    "thread_share", False, "Also run multi_worker_mirrored with TensorFlow's own thread pools "
    "in every task (TF_NUM_INTRAOP_THREADS=0, TF_NUM_INTEROP_THREADS=0), beside the launcher's "
    "share of the cores.")
# TensorFlow reads 0 as "size the pool yourself"; the launcher leaves a variable that is set.
_OWN_THREAD_POOLS = {"TF_NUM_INTRAOP_THREADS": "0", "TF_NUM_INTEROP_THREADS": "0"}

_HEADER = ("keras", "strategy", "replicas", "mode", "accuracy", "examples/s", "step ms",
           "input wait", "time s")


@flags.validator("keras", f"--keras takes {list(task_keras.KERAS_CHOICES)}, comma-separated.")
def _known_kerases(values):
  return values is None or (bool(values) and set(values) <= set(task_keras.KERAS_CHOICES))


@flags.validator("sync_every", "--sync_every takes sync intervals >= 1, comma-separated, e.g. "
                 "1,4,16.")
def _sync_intervals(values):
  return all(v.isdigit() and int(v) >= 1 for v in values)


def _variants():
  """(label, strategy, train flags, environment) of the rows beside the strategies."""
  variants, mwms = [], choices.Name.MULTI_WORKER_MIRRORED
  if _THREAD_SHARE.value:
    variants.append(("TF's own thread pools", mwms, [], _OWN_THREAD_POOLS))
  for h in _SYNC_EVERY.value:
    variants.append((f"local SGD H={h}", mwms, [f"--sync_every={h}"], None))
    variants.append((f"DiLoCo H={h}", mwms,
                     [f"--sync_every={h}", "--outer_optimizer=nesterov"], None))
  return variants


def _row(r: dict):
  name = f"{r['strategy']} ({r['variant']})" if r.get("variant") else r["strategy"]
  if "error" in r:
    return (r["keras"], name, "-", "-", "FAILED", "-", "-", "-", f"{r['seconds']:.0f}")
  return (r["keras"], name, str(r["replicas"]), "sync" if r["sync"] else "async",
          f"{r['accuracy']:.3f}", f"{r['examples_per_second']:.0f}",
          f"{r['step_time_ms']:.1f}",
          "n/a" if r["input_bound"] is None else f"{100 * r['input_bound']:.0f}%",
          f"{r['seconds']:.0f}")


def _print_table(rows) -> None:
  widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
  for n, row in enumerate(rows):
    print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    if n == 0:
      print("  ".join("-" * w for w in widths))


def main(argv):
  del argv
  kerases = _KERAS.value or [keras_support.default_keras()]
  if keras_support.TF_KERAS in kerases and not keras_support.tf_keras_installed():
    missing = keras_support.tf_keras_missing("--keras=tf_keras", keras3_instead=True)
    print(f"tfdist compare: {missing}", file=sys.stderr)
    return 2
  runs = [(keras, name, "", [], None) for keras in kerases for name in _STRATEGIES.value]
  runs += [(keras, name, label, extra, env) for keras in kerases
           for label, name, extra, env in _variants()]
  results = _train_each(runs)
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump(results, f, indent=1)
  return _report(results)


def _train_each(runs) -> list:
  """Each (keras, strategy, variant label, train flags, environment) trained; their results."""
  results = []
  start = time.monotonic()
  with tempfile.TemporaryDirectory(prefix="tfdist-compare-") as workdir:
    for i, (keras, name, label, extra, env) in enumerate(runs, 1):
      shown = f"{name} ({label}, {keras})" if label else f"{name} ({keras})"
      print(f"[{i}/{len(runs)}] {shown} ...", end=" ", flush=True)
      result = train_process.run(name, workdir, keras=keras, epochs=_EPOCHS.value,
                                 batch_size=_BATCH_SIZE.value, timeout=_TIMEOUT.value,
                                 extra_flags=extra, env=env)
      if label:
        result["variant"] = label
      results.append(result)
      print("FAILED" if "error" in result else f"accuracy {result['accuracy']:.3f}",
            f"({result['seconds']:.0f} s; {output.so_far(i, len(runs), time.monotonic() - start)})",
            flush=True)
      if "error" in result:
        print("\n".join(f"    {line}" for line in result["log_tail"]), flush=True)
  return results


def _report(results) -> int:
  """The table, and the verdict against each Keras's baseline; the exit code."""
  print()
  _print_table([_HEADER] + [_row(r) for r in results])
  failed = [f"{_row(r)[1]} ({r['keras']})" for r in results if "error" in r]
  # Each Keras against its own baseline: the first strategy, trained with it.
  baselines = {}
  for r in results:
    baselines.setdefault(r["keras"], r)
  off = [f"{_row(r)[1]} ({r['keras']})" for r in results
         if "error" not in r and "error" not in baselines[r["keras"]]
         and abs(r["accuracy"] - baselines[r["keras"]]["accuracy"]) > _TOLERANCE.value]
  shown = ", ".join(f"{keras} {b['strategy']} ({b['accuracy']:.3f})"
                    for keras, b in baselines.items() if "error" not in b)
  print(f"\nEvery strategy trains the same model on the same data; accuracy must be within "
        f"{_TOLERANCE.value:.2f} of the baseline: {shown or 'none finished'}. "
        "step ms and examples/s are medians over epochs 2+; input wait is the share of "
        "a step spent waiting for data (n/a: parameter-server steps run remotely); "
        "on 2 CPU cores more replicas share the same cores, so they are not faster here. "
        "Keras 3 under parameter_server trains with tfdist.training.loop (its fit cannot run there).")
  if failed or off:
    print(f"FAILED: {failed} did not finish; {off} missed the accuracy tolerance.")
    return 1
  print("OK: every strategy reached single-device accuracy within tolerance.")
  return 0
