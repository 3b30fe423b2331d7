"""Strategies from a name: one registry of `tf.distribute` strategies for Keras.

Example:

>>> strategy = make_strategy("mirrored", cross_device_ops="reduction_to_one_device")
>>> with strategy.scope():
...   model = keras.Sequential([keras.layers.Dense(10)])
...   model.compile(optimizer="sgd", loss="mse")

Names: one_device, default, mirrored, central_storage, multi_worker_mirrored,
parameter_server. What each returns is the real TensorFlow strategy class (the
multi-worker and parameter-server ones are thin subclasses that refuse Keras 3
up front, see `keras_support`).
"""

import contextlib
import inspect
import logging
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import tensorflow as tf

from tfdist import cluster as cluster_lib
from tfdist import keras_support
from tfdist import preflight as preflight_lib
from tfdist import servers as servers_lib

logger = logging.getLogger("tfdist")

_BUILDERS: Dict[str, Callable[..., tf.distribute.Strategy]] = {}

CROSS_DEVICE_OPS = ("auto", "nccl", "hierarchical_copy", "reduction_to_one_device")
COMMUNICATION = ("auto", "ring", "nccl")
# multi_worker_mirrored's gradient packs. TF's default (0) sends all gradients as
# one all-reduce; packs of 4 MB run as concurrent collectives, which on gRPC
# measured 1.4-1.7x faster for 64 MB of 1 MB gradients (fp32 298 -> 179 ms,
# `tfdist bench --suites=allreduce`) and the same for 16 MB and less.
BYTES_PER_PACK = 4 * 2**20

ClusterArg = Union[None, cluster_lib.ClusterSpec,
                   tf.distribute.cluster_resolver.ClusterResolver]


def register(name: str):
  """Decorator: registers a strategy builder under `name`."""
  def decorator(builder):
    _BUILDERS[name] = builder
    return builder
  return decorator


def available_strategies() -> List[str]:
  """The registered strategy names."""
  return sorted(_BUILDERS)


def make_strategy(name: str, **options: Any) -> tf.distribute.Strategy:
  """Builds a `tf.distribute` strategy from its name.

  Args:
    name: one of `available_strategies()`.
    **options: the builder's keyword options, e.g. `devices=`, `cross_device_ops=`
      for "mirrored", `cluster=`, `communication=` for "multi_worker_mirrored".

  Returns:
    A `tf.distribute.Strategy`.

  Raises:
    ValueError: unknown name or invalid option value.
    TypeError: an option the strategy does not take.

  Example:

  >>> strategy = make_strategy("one_device")
  >>> strategy.num_replicas_in_sync
  1
  """
  if name not in _BUILDERS:
    raise ValueError(
        f"Unknown strategy name. Valid names: {available_strategies()}. "
        f"Received: {name!r}")
  builder = _BUILDERS[name]
  valid = list(inspect.signature(builder).parameters)
  unknown = sorted(set(options) - set(valid))
  if unknown:
    raise TypeError(
        f"Strategy {name!r} does not take option(s) {unknown}. Its options: "
        f"{valid}. Received: {options!r}")
  return builder(**options)


# ---------------------------------------------------------------- local builders


@register("default")
def _default() -> tf.distribute.Strategy:
  """TensorFlow's default strategy: no distribution at all."""
  return tf.distribute.get_strategy()


@register("one_device")
def _one_device(device: Optional[str] = None) -> tf.distribute.Strategy:
  """One device: the first GPU if there is one, else the CPU."""
  if device is None:
    device = "/gpu:0" if tf.config.list_logical_devices("GPU") else "/cpu:0"
  _check_devices("device", [device])
  return tf.distribute.OneDeviceStrategy(device)


@register("mirrored")
def _mirrored(devices: Optional[Sequence[str]] = None,
              cross_device_ops: str = "auto") -> tf.distribute.Strategy:
  """Synchronous replicas on this machine's devices.

  `devices` defaults to every GPU or, with none, every logical CPU device, so a
  CPU split by `tfdist.devices.split_physical_device(2)` gives two replicas.
  `cross_device_ops="auto"` uses NCCL with 2+ GPUs, else reduction to one device.
  """
  devices = _compute_devices(devices)
  return tf.distribute.MirroredStrategy(
      devices, cross_device_ops=_cross_device_ops(cross_device_ops, devices))


class CentralStorageStrategy(tf.distribute.experimental.CentralStorageStrategy):
  """`CentralStorageStrategy` under which tf_keras learning-rate schedules work.

  tf_keras's optimizer keeps a schedule's current value in a variable created
  without an aggregation and assigns it in replica context. Under central
  storage that variable is an AggregatingVariable, and the assign raises "You must
  specify an aggregation method". Every replica computes the same value, so
  taking the first replica's is exact.
  """

  def scope(self):
    stack = contextlib.ExitStack()
    stack.enter_context(super().scope())
    stack.enter_context(tf.variable_creator_scope(_first_replica_learning_rate))
    return stack


def _first_replica_learning_rate(next_creator, **kwargs):
  if (kwargs.get("name") == "current_learning_rate" and
      kwargs.get("aggregation") in (None, tf.VariableAggregation.NONE)):
    kwargs["aggregation"] = tf.VariableAggregation.ONLY_FIRST_REPLICA
  return next_creator(**kwargs)


@register("central_storage")
def _central_storage(devices: Optional[Sequence[str]] = None,
                     parameter_device: Optional[str] = None) -> tf.distribute.Strategy:
  """Replicated compute, variables kept once on `parameter_device` (default the CPU)."""
  devices = _compute_devices(devices)
  if parameter_device is not None:
    _check_devices("parameter_device", [parameter_device])
  return CentralStorageStrategy(compute_devices=devices, parameter_device=parameter_device)


def _compute_devices(devices: Optional[Sequence[str]]) -> List[str]:
  if devices is None:
    found = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    return [d.name for d in found]
  if isinstance(devices, str) or not devices:
    raise ValueError(
        "`devices` must be a non-empty list of device names, e.g. "
        f"['/cpu:0', '/cpu:1']. Received: devices={devices!r}")
  _check_devices("devices", devices)
  return list(devices)


def _check_devices(field: str, devices: Sequence[str]) -> None:
  known = [d.name for d in tf.config.list_logical_devices()]
  # Compare type and index only: '/cpu:0' and '/job:localhost/device:CPU:0' are one device.
  available = {_type_and_index(tf.DeviceSpec.from_string(d)) for d in known}
  for device in devices:
    try:
      spec = tf.DeviceSpec.from_string(device)
    except (ValueError, TypeError):
      spec = None
    if spec is None or not spec.device_type:
      raise ValueError(
          f"`{field}` entry is not a device name like '/cpu:0' or '/gpu:1'. "
          f"Received: {device!r}")
    if _type_and_index(spec) not in available:
      raise ValueError(
          f"`{field}` names a device this process does not have. Available: "
          f"{known}. To get more CPU devices, call "
          "tfdist.devices.split_physical_device(n) before TensorFlow starts. "
          f"Received: {device!r}")


def _type_and_index(spec: "tf.DeviceSpec"):
  return spec.device_type.upper(), spec.device_index or 0


def _cross_device_ops(name: str, devices: Sequence[str]):
  if name not in CROSS_DEVICE_OPS:
    raise ValueError(
        f"`cross_device_ops` must be one of {list(CROSS_DEVICE_OPS)}. Received: {name!r}")
  num_gpus = sum("GPU" in d.upper() for d in devices)
  if name == "auto":
    if num_gpus >= 2:
      return tf.distribute.NcclAllReduce()
    # Not TF's default (CollectiveAllReduce): its collective keys restart with every
    # new strategy, so a second MirroredStrategy in the same process (a notebook
    # cell run twice, models trained in a loop) aborts with "Shape mismatch in the
    # collective instance 100" (tensorflow/tensorflow#62790). Reducing on one
    # device keeps no such state and costs little without GPUs.
    name = "reduction_to_one_device"
  if name == "nccl" and num_gpus < 2:
    logger.warning(
        "cross_device_ops='nccl' needs 2 or more GPUs, but the replicas are on %s; "
        "falling back to 'reduction_to_one_device'. Pass "
        "cross_device_ops='reduction_to_one_device' to silence this.", list(devices))
    name = "reduction_to_one_device"
  return {
      "nccl": tf.distribute.NcclAllReduce,
      "hierarchical_copy": tf.distribute.HierarchicalCopyAllReduce,
      "reduction_to_one_device": tf.distribute.ReductionToOneDevice,
  }[name]()


# ------------------------------------------------------------ cluster builders


class _RefusesKeras3:
  """Mixin: a Keras 3 `fit`/`evaluate`/`predict` fails at once with the fix.

  Keras 3 otherwise fails inside its first step with an error that names
  neither the cause nor the fix (keras-team/keras#20585, #18624).
  """

  _tfdist_name = ""

  def _keras3_failure(self) -> Optional[str]:
    raise NotImplementedError

  def experimental_distribute_dataset(self, dataset, options=None):
    # Keras 3's TFEpochIterator distributes the dataset before its first step.
    caller = sys._getframe(1).f_globals.get("__name__", "")
    if caller.startswith("keras."):
      self._maybe_refuse()
    return super().experimental_distribute_dataset(dataset, options)

  def run(self, fn, args=(), kwargs=None, options=None):
    if keras_support.is_keras3_function(fn):
      self._maybe_refuse()
    return super().run(fn, args=args, kwargs=kwargs, options=options)

  def _maybe_refuse(self):
    reason = self._keras3_failure()
    if reason:
      keras_support.refuse_keras3(self._tfdist_name, reason)


class MultiWorkerMirroredStrategy(_RefusesKeras3, tf.distribute.MultiWorkerMirroredStrategy):
  """`tf.distribute.MultiWorkerMirroredStrategy` that refuses Keras 3 when multi-worker."""

  _tfdist_name = "multi_worker_mirrored"

  def _keras3_failure(self):
    return keras_support.SUPPORT[(keras_support.KERAS3, "multi_worker_mirrored (2+ workers)")] \
        if keras_support.is_multi_worker_mirrored(self) else None


class ParameterServerStrategy(_RefusesKeras3, tf.distribute.ParameterServerStrategy):
  """`tf.distribute.ParameterServerStrategy` that refuses Keras 3 and owns its coordinator."""

  _tfdist_name = "parameter_server"

  def _keras3_failure(self):
    return keras_support.SUPPORT[(keras_support.KERAS3, "parameter_server")]

  @property
  def coordinator(self) -> "tf.distribute.experimental.coordinator.ClusterCoordinator":
    """The strategy's `ClusterCoordinator`; TF keeps one per strategy, and Keras reuses it."""
    return tf.distribute.experimental.coordinator.ClusterCoordinator(self)


@register("multi_worker_mirrored")
def _multi_worker_mirrored(cluster: ClusterArg = None,
                           communication: str = "auto",
                           bytes_per_pack: Optional[int] = None,
                           timeout_seconds: Optional[float] = None,
                           preflight_timeout: Optional[float] = None) -> tf.distribute.Strategy:
  """Synchronous all-reduce across workers.

  The cluster comes from, in order: `cluster` (a `ClusterSpec` that knows its task,
  or any TF cluster resolver), else `TF_CONFIG`, else a single local worker.
  `communication="nccl"` without GPUs falls back to ring, with a warning.
  `bytes_per_pack` groups gradients into all-reduces of about that size; None
  is tfdist's `BYTES_PER_PACK`, 0 TF's default (one all-reduce for all).
  Before TF's constructor (which waits forever for a worker that never
  started), every other task must answer within `preflight_timeout` seconds
  (default 30, or TFDIST_PREFLIGHT_TIMEOUT); see `tfdist.preflight`.
  """
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
  resolver = _resolver_for("multi_worker_mirrored", cluster)
  options = tf.distribute.experimental.CommunicationOptions(
      bytes_per_pack=bytes_per_pack, timeout_seconds=timeout_seconds,
      implementation={
          "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
          "ring": tf.distribute.experimental.CommunicationImplementation.RING,
          "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
      }[communication])
  # TF's constructor blocks until every task registers, forever if one never
  # starts: meet the other tasks first, with a deadline.
  spec = _spec_of(resolver)
  if spec is not None:
    preflight_lib.rendezvous(spec, timeout=preflight_timeout)
  try:
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
  return strategy


def _spec_of(resolver) -> Optional[cluster_lib.ClusterSpec]:
  """The resolver's cluster as a ClusterSpec seen from its task; None if single-task."""
  jobs = resolver.cluster_spec().as_dict()
  if sum(len(addresses) for addresses in jobs.values()) < 2 or resolver.task_type is None:
    return None
  return cluster_lib.ClusterSpec.from_dict(
      jobs, task={"type": resolver.task_type, "index": int(resolver.task_id)})


@register("parameter_server")
def _parameter_server(cluster: ClusterArg = None,
                      num_ps_shards: Optional[int] = None,
                      min_shard_bytes: Optional[int] = None,
                      in_process: bool = False,
                      preflight_timeout: Optional[float] = None) -> tf.distribute.Strategy:
  """Asynchronous training: workers run steps, ps tasks hold the variables.

  Args:
    cluster: a `ClusterSpec` or resolver; default `TF_CONFIG`. With `in_process`
      and no cluster, a local chief + 2 workers + 1 ps.
    num_ps_shards: split every variable into this many shards across the ps tasks.
    min_shard_bytes: split variables into shards of at least this many bytes
      (at most one shard per ps task). Exclusive with `num_ps_shards`.
    in_process: start every worker and ps of `cluster` as servers inside this
      process, and coordinate from here. For one machine, tests and notebooks.
    preflight_timeout: seconds the coordinator waits for every worker and ps to
      answer before it connects (default 30, or TFDIST_PREFLIGHT_TIMEOUT).

  On a worker or ps task (per TF_CONFIG or `cluster`) this call starts the
  task's server and never returns: in parameter-server training only the chief
  runs the program, so one script serves every task unchanged.
  """
  if num_ps_shards is not None and min_shard_bytes is not None:
    raise ValueError(
        "Pass at most one of `num_ps_shards` and `min_shard_bytes`. "
        f"Received: num_ps_shards={num_ps_shards!r}, min_shard_bytes={min_shard_bytes!r}")
  for field, value in (("num_ps_shards", num_ps_shards), ("min_shard_bytes", min_shard_bytes)):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
      raise ValueError(f"`{field}` must be an integer >= 1. Received: {value!r}")
  servers = []
  if in_process:
    if cluster is None:
      cluster = cluster_lib.ClusterSpec.local(workers=2, ps=1, chief=True)
    if not isinstance(cluster, cluster_lib.ClusterSpec):
      raise TypeError(
          "`in_process=True` needs a tfdist.ClusterSpec (or none) to start servers "
          f"from. Received: cluster={cluster!r}")
    _validate_cluster("parameter_server", cluster)
    servers = servers_lib.start_servers(cluster)
    if cluster_lib.CHIEF in cluster.jobs:
      cluster = cluster.with_task(cluster_lib.CHIEF, 0)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        cluster.to_tf(), task_type=cluster.task.type if cluster.task else None,
        task_id=cluster.task.index if cluster.task else None, rpc_layer="grpc")
  else:
    resolver = _resolver_for("parameter_server", cluster)
    if resolver.task_type in (cluster_lib.WORKER, cluster_lib.PS):
      servers_lib.serve(resolver)  # Never returns: these tasks only serve.
    spec = _spec_of(resolver)
    if spec is not None:  # The coordinator: every worker and ps must be up.
      preflight_lib.wait_for_tasks(
          spec, timeout=preflight_timeout,
          tasks=[t for t in spec.tasks() if t.type in (cluster_lib.WORKER, cluster_lib.PS)])
  num_ps = len(resolver.cluster_spec().as_dict().get(cluster_lib.PS, ()))
  partitioner = None
  if num_ps_shards is not None:
    partitioner = tf.distribute.experimental.partitioners.FixedShardsPartitioner(num_ps_shards)
  elif min_shard_bytes is not None:
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=min_shard_bytes, max_shards=num_ps)
  strategy = ParameterServerStrategy(resolver, variable_partitioner=partitioner)
  # In-process servers stop when garbage-collected; tie them to the strategy.
  strategy._tfdist_servers = servers
  return strategy


def _resolver_for(name: str, cluster: ClusterArg):
  """A cluster resolver from an explicit spec or resolver, else TF_CONFIG."""
  if isinstance(cluster, tf.distribute.cluster_resolver.ClusterResolver):
    return cluster
  if cluster is None:
    cluster = cluster_lib.ClusterSpec.from_env()
    if cluster is None:
      if name == "parameter_server":
        raise ValueError(
            "parameter_server needs a cluster with ps and worker tasks: set "
            "TF_CONFIG, pass cluster=tfdist.ClusterSpec(...), or pass "
            "in_process=True for a local one. Received: cluster=None and no TF_CONFIG")
      # No cluster at all: a single local worker, as TF itself does.
      return tf.distribute.cluster_resolver.TFConfigClusterResolver()
  if not isinstance(cluster, cluster_lib.ClusterSpec):
    raise TypeError(
        "`cluster` must be a tfdist.ClusterSpec or a tf.distribute cluster resolver. "
        f"Received: {cluster!r}")
  _validate_cluster(name, cluster)
  return cluster.cluster_resolver()


def _validate_cluster(name: str, spec: cluster_lib.ClusterSpec) -> None:
  """Checks that strategy `name` can use every job of `spec`."""
  if name == "multi_worker_mirrored" and cluster_lib.PS in spec.jobs:
    raise ValueError(
        "multi_worker_mirrored cannot use `cluster.ps`: it keeps variables on every "
        "worker. Remove the ps job, or use make_strategy('parameter_server'). "
        f"Received: cluster.ps={list(spec.jobs[cluster_lib.PS])!r}")
  if name == "parameter_server":
    for job in (cluster_lib.PS, cluster_lib.WORKER):
      if job not in spec.jobs:
        raise ValueError(
            f"parameter_server needs a `cluster.{job}` job with at least one task, "
            f"e.g. ClusterSpec.local(workers=2, ps=1, chief=True). Received: {spec!r}")
