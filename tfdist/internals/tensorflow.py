"""TensorFlow's private code that tfdist uses, in one place.

Run with TensorFlow 2.17 and 2.22, the oldest and newest supported (`TESTED`). What each
use needs, and the public issue behind it, is in docs/architecture.md (Private
TensorFlow and Keras code) and docs/known_issues.md.
"""

import contextlib
import functools
import os
import sys
from typing import Iterator, Optional, Sequence, Tuple

from tfdist.internals import versions

TESTED = ((2, 17), (2, 22))

# Patch -> the public issue it works around.
PATCHES = {
    # MultiWorkerMirroredStrategy makes one CPU replica per worker, whatever the
    # logical CPUs; several devices per worker are asked for in
    # tensorflow/tensorflow#49014.
    "logical_cpu_replicas": "tensorflow/tensorflow#49014",
}
GATES = {
    "logical_cpu_replicas": versions.Gate(
        "logical CPU replicas", "TensorFlow", TESTED, PATCHES["logical_cpu_replicas"],
        "multi_worker_mirrored with devices_per_worker above 1 refuses"),
    "key_value_store": versions.Gate(
        "use of the coordination service's key-value store", "TensorFlow", TESTED,
        "no public API; TF's PreemptionCheckpointHandler uses it",
        "no straggler is named in pods while the job trains, and workers are not compared "
        "before training"),
}


def version() -> Optional[versions.Version]:
  """(major, minor) of the TensorFlow imported in this process, or None before it is."""
  tf = sys.modules.get("tensorflow")
  return versions.parse(tf.__version__) if tf is not None else None


@contextlib.contextmanager
def logical_cpu_replicas(count: int) -> Iterator[bool]:
  """Makes MultiWorkerMirroredStrategy's constructor take `count` logical CPUs as replicas.

  TF makes a replica of every GPU (or TPU) of a worker, and of one CPU when
  there is none (`CollectiveAllReduceExtended._initialize_local_devices`).
  Logical CPUs standing in for GPUs need that one choice changed, only while a
  strategy is built: the block's end is the undo. Yields whether it applies
  (False, with a warning, on an untested TensorFlow).
  """
  import tensorflow as tf
  if not GATES["logical_cpu_replicas"].check(versions.parse(tf.__version__)):
    yield False
    return
  from tensorflow.python.distribute import collective_all_reduce_strategy as collective
  extended = collective.CollectiveAllReduceExtended
  original = extended._initialize_local_devices

  def local_devices(self, cluster_resolver, worker_device):
    devices, device_type = original(self, cluster_resolver, worker_device)
    if device_type != "CPU":
      return devices, device_type
    return tuple(f"{worker_device}/device:CPU:{i}" for i in range(count)), "CPU"

  extended._initialize_local_devices = local_devices
  try:
    yield True
  finally:
    extended._initialize_local_devices = original


def expand_slurm_hostlist(nodelist: str) -> Sequence[str]:
  """SLURM's compressed host list ('node[1-3]') as names: TF's own parser.

  Where `scontrol` is missing only: it imports TensorFlow.
  """
  from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver
  return slurm_cluster_resolver.expand_hostlist(nodelist)


def is_multi_worker_mirrored(strategy) -> bool:
  """Whether `strategy` is MultiWorkerMirroredStrategy over 2 or more workers (chief included)."""
  tf = sys.modules.get("tensorflow")
  if tf is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return False
  jobs = strategy.cluster_resolver.cluster_spec().as_dict()
  return len(jobs.get("worker", ())) + len(jobs.get("chief", ())) > 1


def shards(value) -> Optional[list]:
  """The shards of a `ShardedVariable` (parameter servers' `num_ps_shards > 1`), else None."""
  import tensorflow as tf
  sharded = tf.__internal__.distribute.ShardedVariable
  return list(value.variables) if isinstance(value, sharded) else None


def is_sharded(value) -> bool:
  return shards(value) is not None


def lazy_keras_name(keras_attribute) -> Tuple[bool, str]:
  """(resolved yet, module name prefix) of what `tf.keras` is, without loading it.

  `tf.keras` is TF's lazy loader until first used; its own state is read through
  `vars()`, because its `__getattr__` would load Keras.
  """
  state = vars(keras_attribute)
  if "_tfll_initialized" in state:
    if not state["_tfll_initialized"]:
      return False, ""
    return True, {"keras_3": "keras.", "tf_keras": "tf_keras."}.get(
        state.get("_tfll_keras_version"), "")
  # The loader already replaced itself with the module it loaded.
  return True, getattr(keras_attribute, "__name__", "")


def dataset_graph(dataset):
  """The `GraphDef` of a `tf.data.Dataset`: what the tf.data service ships.

  TF has no public reader of it (`Dataset._as_serialized_graph`).
  """
  import tensorflow as tf
  return tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())


def strategy_supports_no_merge_call() -> bool:
  """Whether the current strategy updates in replica context (Keras's optimizers ask TF so)."""
  import tensorflow as tf
  return tf.__internal__.distribute.strategy_supports_no_merge_call()


def smart_cond(pred, true_fn, false_fn):
  """`tf.cond` that runs one branch in Python when `pred` is known (as Keras's optimizers do)."""
  import tensorflow as tf
  return tf.__internal__.smart_cond.smart_cond(pred, true_fn, false_fn)


# --- TF's rule for files under multi-worker strategies, as tf_keras's callbacks
# apply it (tf_keras/src/distribute/distributed_file_utils.py): the chief writes
# to the real path, every other worker into a temporary folder beside it that
# is removed right after (tensorflow/tensorflow#31070 shows the race it avoids).
# One helper for tfdist's own saves and for Keras 3's callbacks under tfdist.

def _task(strategy) -> Tuple[str, int]:
  """(task type, task id) of this process in `strategy`'s cluster; ("worker", 0) without one."""
  resolver = getattr(strategy, "cluster_resolver", None)
  task_type = resolver.task_type if resolver is not None and resolver.task_type else "worker"
  task_id = resolver.task_id if resolver is not None and resolver.task_id is not None else 0
  return task_type, task_id


def _temp_dir(dirpath: str, strategy) -> str:
  return os.path.join(dirpath, f"workertemp_{_task(strategy)[1]}")


def task_dirpath(dirpath: str, strategy) -> str:
  """A folder in `dirpath` of this task's own (`worker-1`, `chief-0`), kept: what only it holds.

  Unlike `write_dirpath`'s, every task has one, the chief too, named by task
  type and id (a cluster may have a chief and a worker 0).
  """
  task_type, task_id = _task(strategy)
  return os.path.join(dirpath, f"{task_type}-{task_id}")


def write_dirpath(dirpath: str, strategy) -> str:
  """`dirpath` on the task whose files count (`should_checkpoint`), else a temporary folder in it."""
  if strategy is None or strategy.extended.should_checkpoint:
    return dirpath
  return _temp_dir(dirpath, strategy)


def write_filepath(filepath: str, strategy) -> str:
  """`filepath` on the task whose files count, else the same name in a temporary folder."""
  dirpath, base = os.path.split(filepath)
  return os.path.join(write_dirpath(dirpath, strategy), base)


def remove_temp_dirpath(write_dir: str, dirpath: str) -> None:
  """Removes `write_dir` if it is a temporary folder for `dirpath` (not `dirpath` itself)."""
  import tensorflow as tf
  if write_dir != dirpath and tf.io.gfile.exists(write_dir):
    tf.io.gfile.rmtree(write_dir)


@contextlib.contextmanager
def chief_dir(dirpath: str, strategy) -> Iterator[str]:
  """Yields the folder to write into for `dirpath` (`write_dirpath`), made; temporary ones removed after."""
  import tensorflow as tf
  write_dir = write_dirpath(dirpath, strategy)
  tf.io.gfile.makedirs(write_dir)  # Exists-ok: workers make the same parents at once.
  try:
    yield write_dir
  finally:
    remove_temp_dirpath(write_dir, dirpath)


@contextlib.contextmanager
def chief_file(filepath: str, strategy) -> Iterator[str]:
  """Yields the path to write `filepath` to (`write_filepath`); a temporary folder is removed after."""
  dirpath = os.path.dirname(filepath)
  with chief_dir(dirpath, strategy) as write_dir:
    yield os.path.join(write_dir, os.path.basename(filepath))


# --- The coordination service's key-value store. MultiWorkerMirroredStrategy
# and ParameterServerStrategy start TF's coordination service, whose store
# every task of the job reaches over the job's own connections. It has no
# public API: TF's own PreemptionCheckpointHandler uses these `context` methods
# (tensorflow/python/distribute/failure_handling/failure_handling.py). tfdist
# carries each task's row of step times through it where the tasks share no
# folder (Kubernetes pods). Nothing is patched: there is nothing to undo.

def _coordination_context():
  """TF's eager context where a strategy started the coordination service, else None.

  Never initializes the context itself: that would fix its configuration
  before the user's strategy is made.
  """
  if "tensorflow" not in sys.modules:
    return None
  from tensorflow.python.eager import context
  ctx = context.context_safe()
  if ctx is None or not ctx._initialized or ctx.coordination_service is None:  # pylint: disable=protected-access
    return None
  return ctx if _store_tested(version()) else None


@functools.lru_cache(maxsize=None)
def _store_tested(installed: Optional[versions.Version]) -> bool:
  """Whether the store's use is tested with `installed` (a warning once, if not)."""
  return GATES["key_value_store"].check(installed)


def coordination_service_up() -> bool:
  """Whether this process's strategy started TF's coordination service (tested TFs only)."""
  return _coordination_context() is not None


def publish(key: str, value: str) -> bool:
  """Sets `key` to `value` in the coordination service's store; whether the service is up.

  The store refuses to insert a key it holds, so the old value goes first: a
  reader between the two waits for the new one (`published`). Neither call
  has a deadline in TensorFlow: with the service's leader unreachable, this
  waits (`tfdist.task.progress` calls it from a thread of its own).
  """
  ctx = _coordination_context()
  if ctx is None:
    return False
  ctx.delete_config_key_value(key)
  ctx.set_config_key_value(key, value)
  return True


def _store_context(key: str):
  ctx = _coordination_context()
  if ctx is None:
    raise RuntimeError("TensorFlow's coordination service is not up in this process (no "
                       f"multi-worker strategy made yet, or an untested TensorFlow). Received: "
                       f"key {key!r}")
  return ctx


def insert(key: str, value: str) -> bool:
  """Sets `key` to `value` unless the store holds it already; whether it was set.

  Raises:
    RuntimeError: the service is not up, or failed (its leader gone: the job is ending).
  """
  ctx = _store_context(key)
  import tensorflow as tf
  try:
    ctx.set_config_key_value(key, value)
  except tf.errors.AlreadyExistsError:
    return False
  except tf.errors.OpError as error:
    raise RuntimeError(f"TensorFlow's coordination service failed. Received: {error}") from error
  return True


def wait_for_key(key: str, timeout_ms: int) -> Optional[str]:
  """The value of `key`, waiting up to `timeout_ms` for it to be set; None if it is not by then.

  The wait includes the round trip to the service's leader: a key set already
  reads as None under a timeout shorter than that. A read that times out stays
  pending at the leader until the key is set (TensorFlow does not cancel it).

  Raises:
    RuntimeError: the service is not up, or failed (its leader gone: the job is ending).
  """
  ctx = _store_context(key)
  import tensorflow as tf
  try:
    return ctx.get_config_key_value(key, timeout_in_ms=max(1, int(timeout_ms)))
  except (tf.errors.DeadlineExceededError, tf.errors.NotFoundError):
    return None
  except tf.errors.OpError as error:
    raise RuntimeError(f"TensorFlow's coordination service failed. Received: {error}") from error


def abort_collectives(message: str) -> None:
  """Makes every collective of this process fail now with `message`, instead of waiting.

  What MultiWorkerMirroredStrategy's own health check does when a peer is
  gone (`context.abort_collective_ops`, private): a task blocked in an
  all-reduce whose peer will never join raises instead of hanging. Collectives
  stay unusable in this process afterwards: it is for a job that is failing.
  """
  ctx = _coordination_context()
  if ctx is None:
    return
  import tensorflow as tf
  ctx.abort_collective_ops(tf.errors.FAILED_PRECONDITION, message)


def published(key: str, timeout_ms: int) -> Optional[str]:
  """The value of `key` in the coordination service's store; None if unset within `timeout_ms`."""
  ctx = _coordination_context()
  if ctx is None:
    return None
  import tensorflow as tf
  try:
    return ctx.get_config_key_value(key, timeout_in_ms=max(1, int(timeout_ms)))
  except tf.errors.OpError:  # Not set in time, or the service is failing: no value to read.
    return None
