"""multi_worker_mirrored: synchronous all-reduce across workers (RING, or NCCL on GPUs).

Builds TF's MultiWorkerMirroredStrategy from a cluster (explicit, else the
environment, else one local worker), after a preflight that every other task
answers: TF's constructor waits forever for a worker that never started.
"""

import contextlib
import logging
import sys
from typing import Optional

import tensorflow as tf

from tfdist._choices import COMMUNICATION  # Re-exported as tfdist.strategies.COMMUNICATION.
from tfdist._choices import Name
from tfdist import _keras_support as keras_support
from tfdist.internals import keras as keras_internals
from tfdist.internals import keras_callbacks
from tfdist.internals import tensorflow as tf_internals
from tfdist.cluster import preflight as preflight_lib
from tfdist import cluster as cluster_lib
from tfdist.strategies import _keras_guard as keras_guard
from tfdist.strategies import _registry as registry
from tfdist.task import _imports as task_imports

logger = logging.getLogger("tfdist")

# multi_worker_mirrored's gradient packs. TF's default (0) sends all gradients as
# one all-reduce; packs of 4 MB run as concurrent collectives, which on gRPC
# measured 1.4-1.7x faster for 64 MB of 1 MB gradients (fp32 298 -> 179 ms,
# `tfdist bench --suites=allreduce`) and the same for 16 MB and less.
BYTES_PER_PACK = 4 * 2**20


def check_cluster(spec: cluster_lib.ClusterSpec) -> None:
  """multi_worker_mirrored keeps variables on every worker: no ps job."""
  if cluster_lib.PS in spec.jobs:
    raise ValueError(
        "multi_worker_mirrored cannot use `cluster.ps`: it keeps variables on every "
        "worker. Remove the ps job, or use make_strategy('parameter_server'). "
        f"Received: cluster.ps={list(spec.jobs[cluster_lib.PS])!r}")


class MultiWorkerMirroredStrategy(keras_guard.RefusesKeras3, keras_guard.RefusesJitCompile,
                                  tf.distribute.MultiWorkerMirroredStrategy):
  """`tf.distribute.MultiWorkerMirroredStrategy` under which Keras 3 trains too.

  With 2+ workers it enables `keras_internals.enable_multi_worker()`, and
  `keras_callbacks.enable_chief_writes()` for Keras 3's own file-writing
  callbacks, once Keras 3 is imported (a process that trains with tf_keras
  never imports it); for a
  Keras 3 outside the tested versions, a Keras 3 `fit` is refused up front with
  the reason instead of failing inside its first step. So is a step compiled
  with XLA across CPU workers: XLA has no CPU collectives.
  """

  _tfdist_name = Name.MULTI_WORKER_MIRRORED

  def _jit_failure(self):
    several = keras_support.is_multi_worker_mirrored(self) or \
        len(self.extended.worker_devices) > 1
    if several and keras_guard.on_cpus(self):
      return keras_guard.XLA_CPU_COLLECTIVES
    return None

  def _keras3_failure(self):
    if not keras_support.is_multi_worker_mirrored(self) or keras_internals.is_enabled():
      return None
    return keras3_refusal()


def keras3_refusal() -> str:
  """Why a Keras 3 `fit` is refused under this multi-worker strategy: the upstream bug, and
  why tfdist's patch for it is not applied."""
  # A tested Keras 3 has no unsupported reason: then the strategy was built without
  # make_strategy (the class itself), which is what applies the patch.
  reason = keras_internals.unsupported_reason() or (
      "tfdist's patch for it is applied by tfdist.make_strategy('multi_worker_mirrored'), "
      "which did not build this strategy: build it with make_strategy")
  return f"{keras_support.MWMS_FAILURE}; {reason}"


def _check_devices_per_worker(devices_per_worker) -> None:
  if isinstance(devices_per_worker, bool) or not isinstance(devices_per_worker, int) \
      or devices_per_worker < 1:
    raise ValueError("`devices_per_worker` must be an integer >= 1, or None for TF's choice. "
                     f"Received: devices_per_worker={devices_per_worker!r}")
  if tf.config.list_physical_devices("GPU"):
    raise ValueError(
        "`devices_per_worker` stands logical CPUs in for GPUs on a machine without any; "
        "with GPUs TF makes one replica per visible GPU: choose them with "
        f"CUDA_VISIBLE_DEVICES. Received: devices_per_worker={devices_per_worker}")
  # Not list_logical_devices: that would start the runtime before the strategy.
  split = tf.config.get_logical_device_configuration(tf.config.list_physical_devices("CPU")[0])
  have = len(split) if split else 1
  if devices_per_worker > have:
    raise ValueError(
        f"`devices_per_worker={devices_per_worker}` needs that many logical CPUs on each "
        f"worker: call tfdist.devices.split_physical_device({devices_per_worker}) before "
        f"make_strategy. Received: devices_per_worker={devices_per_worker}, logical CPUs={have}")


def multi_worker_mirrored(cluster: registry.ClusterArg = None,
                           communication: str = "auto",
                           bytes_per_pack: Optional[int] = None,
                           timeout_seconds: Optional[float] = None,
                           preflight_timeout: Optional[float] = None,
                           devices_per_worker: Optional[int] = None) -> tf.distribute.Strategy:
  """Synchronous all-reduce across workers.

  The cluster comes from, in order: `cluster` (a `ClusterSpec` that knows its task,
  or any TF cluster resolver), else `TF_CONFIG`, else a single local worker.
  `communication="nccl"` without GPUs falls back to ring, with a warning.
  `bytes_per_pack` groups gradients into all-reduces of about that size; None
  is tfdist's `BYTES_PER_PACK`, 0 TF's default (one all-reduce for all).
  Before TF's constructor (which waits forever for a worker that never
  started), every other task must answer within `preflight_timeout` seconds
  (default 30, or TFDIST_PREFLIGHT_TIMEOUT); see `tfdist.cluster.preflight`.
  `devices_per_worker=k` on machines without GPUs makes k logical CPUs of each
  worker its replicas (`split_physical_device(k)` first), standing in for k
  GPUs per worker: the all-reduce then crosses devices and workers as it would
  there. None: TF's choice (every GPU, else one CPU).
  """
  if devices_per_worker is not None:
    _check_devices_per_worker(devices_per_worker)
  if communication not in COMMUNICATION:
    raise ValueError(
        f"`communication` must be one of {list(COMMUNICATION)}. Received: {communication!r}")
  if bytes_per_pack is None:
    bytes_per_pack = BYTES_PER_PACK
  if isinstance(bytes_per_pack, bool) or not isinstance(bytes_per_pack, int) or bytes_per_pack < 0:
    raise ValueError(
        "`bytes_per_pack` must be an integer >= 0 (0: TF's single pack), or None for "
        f"tfdist's {BYTES_PER_PACK // 2**20} MB packs. Received: {bytes_per_pack!r}")
  if timeout_seconds is not None and not timeout_seconds > 0:
    raise ValueError(
        "`timeout_seconds` must be > 0, or None for no collective timeout. "
        f"Received: {timeout_seconds!r}")
  if communication == "nccl" and not tf.config.list_physical_devices("GPU"):
    logger.warning(
        "communication='nccl' runs only on GPUs and this machine has none; "
        "falling back to 'ring'. Pass communication='ring' to silence this.")
    communication = "ring"
  resolver = registry.cluster_resolver(Name.MULTI_WORKER_MIRRORED, cluster)
  if resolver is None:  # No cluster at all: a single local worker, as TF itself does.
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
  options = tf.distribute.experimental.CommunicationOptions(
      bytes_per_pack=bytes_per_pack, timeout_seconds=timeout_seconds,
      implementation={
          "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
          "ring": tf.distribute.experimental.CommunicationImplementation.RING,
          "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
      }[communication])
  # TF's constructor blocks until every task registers, forever if one never
  # starts: meet the other tasks first, with a deadline.
  spec = registry.spec_of(resolver)
  if spec is not None:
    preflight_lib.rendezvous(spec, timeout=preflight_timeout)
  try:
    with (tf_internals.logical_cpu_replicas(devices_per_worker) if devices_per_worker
          else contextlib.nullcontext(True)) as applied:
      if not applied:
        low, high = (".".join(map(str, v)) for v in tf_internals.TESTED)
        raise RuntimeError(
            f"`devices_per_worker` changes a private TensorFlow choice tested with TensorFlow "
            f"{low} to {high} only; install one of those, or leave it None. "
            f"Received: TensorFlow {tf.__version__}")
      strategy = MultiWorkerMirroredStrategy(cluster_resolver=resolver,
                                             communication_options=options)
  except (ValueError, RuntimeError) as e:
    if "program startup" in str(e) or "already been initialized" in str(e):
      raise RuntimeError(
          "multi_worker_mirrored must be created before any other TensorFlow op "
          "runs, because it configures collective ops for the whole process. Move "
          "`make_strategy(...)` to the top of the program. "
          f"Received: {e}") from e
    raise
  if keras_support.is_multi_worker_mirrored(strategy):
    _when_imported(keras_internals.TRAINER_MODULE, _enable_multi_worker)
    _when_imported(keras_callbacks.CALLBACKS_MODULE, _enable_chief_writes)
  return strategy


# Keras 3's patches wait for Keras 3: importing it to patch it cost a process that trains
# with tf_keras (TF_USE_LEGACY_KERAS=1, as `tfdist launch` sets by default) about a second
# of CPU, Matplotlib included (docs/benchmarks/launch.md, "What Keras 3 cost a tf_keras
# worker's start").
def _when_imported(module: str, function) -> None:
  """`function(module)` now if `module` is imported (raising, as before), else right after it
  first executes (once per process, however many strategies it makes)."""
  if module in sys.modules:
    function(sys.modules[module])
  else:
    task_imports.after_import(module, function)


def _enable_multi_worker(_) -> None:
  keras_internals.enable_multi_worker()


def _enable_chief_writes(_) -> None:
  # Keras 3's own BackupAndRestore, ModelCheckpoint and TensorBoard write once, from the
  # chief, and a restored backup reads on after its batch, as under `tfdist launch`.
  from tfdist.data import replay  # pylint: disable=import-outside-toplevel
  keras_callbacks.enable_chief_writes(on_restore=replay.read_on_keras3_fit)
