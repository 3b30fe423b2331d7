"""`tfdist train --strategy mirrored --devices_per_worker 2`

Trains the default model (a small CNN on the embedded digits) under any
strategy. For multi_worker_mirrored and parameter_server it starts a local
cluster itself (one process per task, via `tfdist launch`) unless TF_CONFIG
says it already runs inside one.
"""

import dataclasses
import os
import signal
import subprocess
import sys

from absl import flags

from tfdist import _variables as variables
from tfdist import cluster as cluster_lib
from tfdist import _choices as choices
from tfdist import _keras_support as keras_support
from tfdist.training import _local_sgd as local_sgd_lib
from tfdist.training import precision
from tfdist.cli import self_launch
from tfdist.training import config as train_config
from tfdist.training import _user_code as user_code
from tfdist.task import _keras as task_keras

_STRATEGY = flags.DEFINE_enum("strategy", choices.Name.ONE_DEVICE, choices.strategy_names(),
                              "Strategy name.")
_EPOCHS = flags.DEFINE_integer("epochs", 15, "Epochs to train.", lower_bound=1)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "Global batch size; each replica gets "
                                   "batch_size / replicas.", lower_bound=1)
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 1e-2, "Base learning rate (Adam).",
                                    lower_bound=0)
_LR_SCALING = flags.DEFINE_enum("lr_scaling", "none", list(choices.SCALING_RULES),
                                "Multiply the learning rate by replicas (linear) or "
                                "sqrt(replicas).")
_WARMUP_STEPS = flags.DEFINE_integer("warmup_steps", 0, "Linear warm-up steps from the base "
                                     "to the scaled learning rate.", lower_bound=0)
_DEVICES_PER_WORKER = flags.DEFINE_integer(
    "devices_per_worker", 0, "Split the CPU into this many logical devices first (0: leave as "
    "is); under multi_worker_mirrored, each worker's replicas.", lower_bound=0)
_WORKERS = flags.DEFINE_integer("workers", 2, "Workers of the local cluster started for "
                                "multi-worker strategies.", lower_bound=1)
_PS = flags.DEFINE_integer("ps", 1, "Parameter servers of the local cluster for "
                           "parameter_server.", lower_bound=1)
_IN_PROCESS = flags.DEFINE_bool("in_process", False, "parameter_server: run the whole "
                                "cluster in this process instead of one process per task.")
_COMMUNICATION = flags.DEFINE_enum("communication", "auto", list(choices.COMMUNICATION),
                                   "multi_worker_mirrored collective implementation.")
_CROSS_DEVICE_OPS = flags.DEFINE_enum("cross_device_ops", "auto", list(choices.CROSS_DEVICE_OPS),
                                      "mirrored all-reduce implementation.")
_COMPRESS_GRADIENTS = flags.DEFINE_bool(
    "compress_gradients", False, "All-reduce gradients in float16 (half the bytes; mirrored "
    "and multi_worker_mirrored).")
_ACCUMULATE_STEPS = flags.DEFINE_integer(
    "accumulate_steps", 1, "Compute each global batch in this many micro-batches per replica "
    "and update once, with the gradient of the whole batch (memory for 1/K of it).",
    lower_bound=1)
_SYNC_EVERY = flags.DEFINE_integer(
    "sync_every", 0, "Local SGD (mirrored, multi_worker_mirrored): each replica applies its "
    "own gradients, and the weights are averaged every this many steps; 0: every step "
    "all-reduces the gradients.", lower_bound=0)
_OUTER_OPTIMIZER = flags.DEFINE_enum(
    "outer_optimizer", "none", list(local_sgd_lib.OUTER_OPTIMIZERS), "With --sync_every: none (local SGD: "
    "average the weights) or nesterov (DiLoCo: the averaged change since the last sync "
    "applied by SGD with Nesterov momentum).")
_OUTER_LEARNING_RATE = flags.DEFINE_float(
    "outer_learning_rate", local_sgd_lib.OUTER_LEARNING_RATE, "DiLoCo's outer learning rate.",
    lower_bound=0)
_OUTER_MOMENTUM = flags.DEFINE_float("outer_momentum", local_sgd_lib.OUTER_MOMENTUM,
                                     "DiLoCo's outer Nesterov momentum.", lower_bound=0,
                                     upper_bound=1)
_PRECISION = flags.DEFINE_enum(
    "precision", "float32", list(precision.POLICIES), "Keras dtype policy: mixed ones compute "
    "in 16 bits and keep float32 variables (mixed_float16 adds loss scaling).")
_TIMEOUT = flags.DEFINE_float("timeout", 600, "Seconds before a local cluster is stopped.",
                              lower_bound=1)
_MAX_RESTARTS = flags.DEFINE_integer(
    "max_restarts", 0, "Local cluster: restart failed tasks this many times; with "
    "--checkpoint_dir training resumes from the last backup.", lower_bound=0)
_CHECKPOINT_DIR = flags.DEFINE_string(
    "checkpoint_dir", None, "Back up every epoch here, resume from it when the job restarts, "
    "and save the final model.keras (written once, by the chief).")
_EXPORT_DIR = flags.DEFINE_string(
    "export_dir", None, "Export the trained model here as a SavedModel for serving, in a new "
    "numbered version folder (TF Serving's layout), written once, by the chief.")
_EVALUATOR = flags.DEFINE_bool(
    "evaluator", False, "Add a sidecar evaluator task to the local cluster: it evaluates "
    "each epoch's checkpoint in --checkpoint_dir (written by the chief) on the held-out data "
    "and writes the results to TensorBoard (--tensorboard_dir, else checkpoint_dir/eval).")
_TENSORBOARD_DIR = flags.DEFINE_string("tensorboard_dir", None, "TensorBoard logs (the chief's).")
_MODEL = flags.DEFINE_string("model", None, "Your model: a .py file or module defining "
                             "model_fn() (default: a small CNN).")
_DATA = flags.DEFINE_string("data", None, "Your data: a .py file or module defining "
                            "dataset_fn(input_context[, global_batch_size]) and optionally "
                            "STEPS_PER_EPOCH (default: the embedded digits).")
_OUTPUT = flags.DEFINE_string("output", None, "Write the result as JSON here (only the chief, "
                              "or worker 0, writes).")
_KERAS = flags.DEFINE_enum(
    "keras", None, list(task_keras.KERAS_CHOICES),
    "The Keras of the default model and of `tf.keras` (default: TF_USE_LEGACY_KERAS if "
    "set, else tf_keras where it is installed, else keras3). A --model is trained with the "
    "Keras it builds, either one.")
_VERBOSE = flags.DEFINE_integer("verbose", 2, "Keras fit verbosity (0, 1 or 2).",
                                lower_bound=0, upper_bound=2)

_MULTI_WORKER = train_config.MULTI_WORKER


def _strategy_options() -> dict:
  traits = choices.strategy(_STRATEGY.value)
  # The options users choose by name: each is a flag of the same name.
  options = {option: flags.FLAGS[option].value for option, _ in traits.choices}
  if traits.kind == choices.COLLECTIVE and _DEVICES_PER_WORKER.value > 1:
    options["devices_per_worker"] = _DEVICES_PER_WORKER.value  # Each worker's stand-in GPUs.
  if traits.kind == choices.PARAMETER_SERVER and _IN_PROCESS.value:
    # In the private network, or on the host network that TFDIST_NETWORK=host accepted.
    options.update(in_process=True, network="host")
  return options


@flags.multi_flags_validator(
    ["outer_optimizer", "outer_learning_rate", "outer_momentum", "sync_every"],
    "--outer_optimizer, --outer_learning_rate and --outer_momentum are DiLoCo's outer step "
    "every --sync_every steps, and need --sync_every.")
def _outer_needs_sync_every(values):
  outer_default = (values["outer_optimizer"] == "none"
                   and values["outer_learning_rate"] == local_sgd_lib.OUTER_LEARNING_RATE
                   and values["outer_momentum"] == local_sgd_lib.OUTER_MOMENTUM)
  return outer_default or values["sync_every"] > 0


@flags.multi_flags_validator(["evaluator", "in_process"], "--evaluator adds an evaluator task "
                             "to the local cluster, and --in_process runs no cluster: drop one.")
def _evaluator_needs_a_cluster(values):
  return not (values["evaluator"] and values["in_process"])


def _config(keras: str) -> train_config.TrainConfig:
  return train_config.TrainConfig(
      strategy=_STRATEGY.value, epochs=_EPOCHS.value, batch_size=_BATCH_SIZE.value,
      learning_rate=_LEARNING_RATE.value, lr_scaling=_LR_SCALING.value,
      warmup_steps=_WARMUP_STEPS.value, strategy_options=_strategy_options(),
      verbose=_VERBOSE.value, checkpoint_dir=_CHECKPOINT_DIR.value,
      tensorboard_dir=_TENSORBOARD_DIR.value, export_dir=_EXPORT_DIR.value,
      evaluator=_EVALUATOR.value, precision=_PRECISION.value,
      compress_gradients=_COMPRESS_GRADIENTS.value, accumulate_steps=_ACCUMULATE_STEPS.value,
      local_sgd=_local_sgd_options(), keras=keras)


def _local_sgd_options():
  if not _SYNC_EVERY.value:
    return None
  return local_sgd_lib.LocalSGDOptions(_SYNC_EVERY.value, _OUTER_OPTIMIZER.value,
                                       _OUTER_LEARNING_RATE.value, _OUTER_MOMENTUM.value)


def _needs_local_cluster() -> bool:
  """Multi-worker, and not already inside a cluster (TF_CONFIG, Kubernetes, SLURM)."""
  return (_STRATEGY.value in _MULTI_WORKER and not _IN_PROCESS.value
          and not self_launch.in_cluster())


def _launch_self(keras: str) -> int:
  if choices.strategy(_STRATEGY.value).kind == choices.PARAMETER_SERVER:
    spec = cluster_lib.ClusterSpec.local(_WORKERS.value, ps=_PS.value, chief=True,
                                         evaluator=_EVALUATOR.value)
  else:
    spec = cluster_lib.ClusterSpec.local(_WORKERS.value, evaluator=_EVALUATOR.value)
  print(f"[tfdist train] starting a local cluster: {spec}", flush=True)
  # Every flag goes on to the tasks, --output too: the chief or worker 0 writes it.
  return self_launch.run("train", sys.modules[__name__], spec, timeout=_TIMEOUT.value,
                         max_restarts=_MAX_RESTARTS.value, keras=keras)


# Set in the copy of this command that runs inside the private network.
_PRIVATE_NETWORK_ENV = variables.IN_PRIVATE_NETWORK


def _run_in_private_network():
  """Runs this command again in a loopback-only network namespace; its exit code.

  An in-process cluster's servers listen on every interface (TensorFlow binds
  0.0.0.0), and they live in this process, so the process itself moves: the
  same command, the same flags, in a namespace that has only loopback.
  Returns None when TFDIST_NETWORK=host accepts this machine's network (the
  cluster then runs here), and 2 where no namespace can be made.
  """
  from tfdist.launch import private_network  # Deferred: only --in_process needs it.
  report = lambda message: print(f"[tfdist train] {message}", flush=True)
  network = os.environ.get(private_network.NETWORK_ENV, "auto")
  if network == "host":
    return None  # The user accepted this machine's network.
  try:
    with private_network.enter(network, cluster_lib.ClusterSpec.local(1), report) as prefix:
      report("the in-process cluster runs in a private loopback-only network")
      return _run_forwarding_signals(
          prefix + self_launch.command("train", sys.modules[__name__]),
          env={**os.environ, _PRIVATE_NETWORK_ENV: "1"})
  except private_network.Unavailable as e:  # Raised on entering, before anything runs.
    print(f"tfdist train: --in_process: {e}", file=sys.stderr)
    return 2


def _run_forwarding_signals(command, env) -> int:
  """Runs `command`, passing SIGINT and SIGTERM on to it; its exit code as a shell gives it."""
  process = subprocess.Popen(command, env=env)
  forward = lambda signum, frame: process.send_signal(signum)
  previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
  try:
    code = process.wait()
  finally:
    for sig, handler in previous.items():
      signal.signal(sig, handler)
  return code if code >= 0 else 128 - code


def main(argv):
  del argv  # No positional arguments.
  try:
    # A TF_USE_LEGACY_KERAS neither 1 nor 0 raises, and tf_keras chosen where it is missing.
    keras = task_keras.resolve_here(_KERAS.value)
    # `tf.keras` in a --model module resolves to the same Keras, here and in the tasks.
    keras_support.select(keras)
    config = _config(keras)  # The job's rules, checked once, before anything starts.
  except ValueError as e:
    print(f"tfdist train: {e}", file=sys.stderr)
    return 2
  if _needs_local_cluster():
    return _launch_self(keras)
  if _IN_PROCESS.value and os.environ.get(_PRIVATE_NETWORK_ENV) != "1":
    code = _run_in_private_network()
    if code is not None:
      return code
  if _DEVICES_PER_WORKER.value:
    from tfdist import devices  # Deferred: imports TensorFlow.
    devices.split_physical_device(_DEVICES_PER_WORKER.value)
  from tfdist.training import job  # Deferred: imports TensorFlow.
  try:
    config = dataclasses.replace(config, **user_code.config_fields(
        _MODEL.value, _DATA.value, _BATCH_SIZE.value))
  except ValueError as e:
    print(f"tfdist train: {e}", file=sys.stderr)
    return 2
  result = job.run_task(config)
  if result is None:  # The evaluator task: it evaluated the chief's checkpoints.
    return 0
  print(f"strategy={result.strategy} keras={result.keras} replicas={result.replicas} "
        f"accuracy={result.accuracy:.4f} loss={result.losses[-1]:.4f} examples/s={result.examples_per_second:.0f} "
        f"step_time_ms={result.step_time_ms:.2f} weights={result.weights_digest} "
        f"compute_dtype={result.compute_dtype} "
        f"input_bound={'n/a' if result.input_bound is None else f'{result.input_bound:.2f}'}",
        flush=True)
  if result.export_path:
    print(f"exported a SavedModel for serving to {result.export_path}", flush=True)
  self_launch.write_result(_OUTPUT.value, result.as_dict())
  return 0
