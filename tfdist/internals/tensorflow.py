"""TensorFlow's private code that tfdist uses, in one place.

Tested with TensorFlow 2.21 (`TESTED`); setup.cfg pins that series. What each
use needs, and the public issue behind it, is in docs/known_issues.md.
"""

import contextlib
import sys
from typing import Iterator, Optional, Sequence, Tuple

from tfdist.internals import versions

TESTED = ((2, 21), (2, 21))

# Patch -> the public issue it works around.
PATCHES = {
    # MultiWorkerMirroredStrategy makes one CPU replica per worker, whatever the
    # logical CPUs; several devices per worker are asked for in
    # tensorflow/tensorflow#49014.
    "logical_cpu_replicas": "tensorflow/tensorflow#49014",
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
  if not versions.check("TensorFlow", versions.parse(tf.__version__), TESTED,
                        "logical CPU replicas", PATCHES["logical_cpu_replicas"]):
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
  """SLURM's compressed host list ('node[1-3]') as names: TF's own parser."""
  from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver
  return slurm_cluster_resolver.expand_hostlist(nodelist)


def expand_slurm_tasks_per_node(tasks_per_node: str) -> Sequence[int]:
  """SLURM's compressed tasks per node ('2(x3),1') as counts: TF's own parser."""
  from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver
  return slurm_cluster_resolver.expand_tasks_per_node(tasks_per_node)


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
