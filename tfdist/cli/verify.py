"""`tfdist verify --model my_model.py --data my_data.py --strategy mirrored
--devices_per_worker 2`

Trains your compiled model under the strategy and on one device, from the same
initial weights on the same global batches, and prints, step by step, how far
the loss, the gradients and the weights are apart, and how far the replicas'
copies of the weights are; exits 1 at a difference beyond `--tolerance`
(`tfdist.verify`). For multi_worker_mirrored it starts a local cluster of
`--workers` processes itself unless it already runs inside one.

`--model` names a .py file or module that defines `model_fn()` (or
`file.py:function`), returning a compiled Keras model; `--data` one that
defines `dataset_fn()` (or `dataset_fn(input_context[, global_batch_size])`,
as for `tfdist train`), returning batches of the global batch size.
"""

import json
import os
import sys

from absl import flags

from tfdist import _choices as choices
from tfdist import cluster as cluster_lib
from tfdist.cli import self_launch
from tfdist.training import _user_code as user_code

_MODEL = flags.DEFINE_string("model", None, "Your model: a .py file or module defining "
                             "model_fn() that returns a compiled Keras model; "
                             "`path.py:function` names another function.", required=True)
_DATA = flags.DEFINE_string("data", None, "Your data: a .py file or module defining "
                            "dataset_fn() that returns global batches (the same ones each "
                            "call); `path.py:function` names another function.", required=True)
_STRATEGY = flags.DEFINE_enum(
    "strategy", choices.Name.MIRRORED,
    choices.strategy_names(choices.SINGLE_MACHINE, choices.COLLECTIVE),
    "The strategy to hold to one device.")
_STEPS = flags.DEFINE_integer("steps", 5, "Training steps to compare.", lower_bound=1)
_TOLERANCE = flags.DEFINE_float("tolerance", 1e-5, "Largest difference allowed, relative to "
                                "the largest one-device value (absolute below 1).")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "Global batch size, for a "
                                   "dataset_fn(input_context, global_batch_size).",
                                   lower_bound=1)
_DEVICES_PER_WORKER = flags.DEFINE_integer(
    "devices_per_worker", 0, "Split the CPU into this many logical devices (0: leave as is); "
    "under multi_worker_mirrored, each worker's replicas.", lower_bound=0)
_WORKERS = flags.DEFINE_integer("workers", 2, "Workers of the local cluster started for "
                                "multi_worker_mirrored.", lower_bound=1)
_TIMEOUT = flags.DEFINE_float("timeout", 600, "Seconds before a local cluster is stopped.",
                              lower_bound=1)
_OUTPUT = flags.DEFINE_string("output", None, "Write the report as JSON here (the first "
                              "worker's).")
# Not `result_file`: that was this command's --output, and is refused with its new name.
_REPORT_FLAG = "report_file"
_REPORT_FILE = flags.DEFINE_string(_REPORT_FLAG, None, "Internal: the first worker of the "
                                   "cluster this command started writes the report here.")


def _function(value: str, flag: str, default: str):
  """`path_or_module[:function]` -> the function (default name `default`)."""
  name = default
  head, _, tail = value.rpartition(":")
  if head and tail.isidentifier():
    value, name = head, tail
  return user_code.function(user_code.load_module(value, flag), name, flag)


def _dataset_fn(fn):
  """`fn` as a function of nothing: given the whole data's input context if it takes one."""
  import inspect  # pylint: disable=g-import-not-at-top
  if not inspect.signature(fn).parameters:
    return fn
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with_batch = user_code.dataset_fn_with_batch(fn, _BATCH_SIZE.value)
  return lambda: with_batch(tf.distribute.InputContext())


def _print(report: dict) -> None:
  print(f"{'step':>4} {'loss':>12} {'one device':>12} {'loss diff':>10} {'grad diff':>10} "
        f"{'weight diff':>11} {'replica diff':>12}")
  for row in report["steps"]:
    print(f"{row['step']:>4} {row['loss']:>12.6g} {row['one_device_loss']:>12.6g} "
          f"{row['loss_difference']:>10.2e} {row['gradient_difference']:>10.2e} "
          f"{row['weight_difference']:>11.2e} {row['replica_difference']:>12.2e}")
  print(report["summary"], flush=True)


def main(argv):
  del argv  # No positional arguments.
  multi_worker = choices.strategy(_STRATEGY.value).kind == choices.COLLECTIVE
  if multi_worker and not self_launch.in_cluster():
    spec = cluster_lib.ClusterSpec.local(_WORKERS.value)
    print(f"[tfdist verify] starting a local cluster: {spec}", flush=True)
    report = self_launch.run_for_result("verify", sys.modules[__name__], spec,
                                        timeout=_TIMEOUT.value, result_flag=_REPORT_FLAG)
    if report is None:
      return 2
    _print(report)
    if _OUTPUT.value:
      with open(_OUTPUT.value, "w") as f:
        json.dump(report, f, indent=1)
    return 0 if report["agrees"] else 1
  options = {}
  if multi_worker and _DEVICES_PER_WORKER.value > 1:
    options["devices_per_worker"] = _DEVICES_PER_WORKER.value
  elif _DEVICES_PER_WORKER.value:
    from tfdist import devices  # Deferred: imports TensorFlow.
    devices.split_physical_device(_DEVICES_PER_WORKER.value)
  try:
    model_fn = _function(_MODEL.value, "model", "model_fn")
    dataset_fn = _dataset_fn(_function(_DATA.value, "data", "dataset_fn"))
  except ValueError as e:
    print(f"tfdist verify: {e}", file=sys.stderr)
    return 2
  from tfdist.training import verification  # Deferred: imports TensorFlow.
  report = verification.verify(model_fn, dataset_fn, strategy=_STRATEGY.value,
                               steps=_STEPS.value, tolerance=_TOLERANCE.value, **options)
  result = report.as_dict()
  if not multi_worker or self_launch.is_writer(cluster_lib.ClusterSpec.from_env()):
    _print(result)
  if multi_worker and self_launch.launched_by_itself(_REPORT_FILE.value):
    self_launch.write_result(_REPORT_FILE.value, result)
    return 0  # A task of our own cluster: the launching process reads the verdict.
  self_launch.write_result(_OUTPUT.value, result)
  return 0 if report.agrees else 1
