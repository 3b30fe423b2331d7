"""Keras 3 under tf.distribute where Keras itself fails: narrow, gated, undoable.

On TensorFlow's backend, Keras 3 (3.8 through 3.16 measured here) cannot `fit`,
`evaluate` or `predict` under MultiWorkerMirroredStrategy with two or more
workers (keras-team/keras#20585). Its TensorFlow trainer fails in three places:

1. `_maybe_symbolic_build` averages the first input batch across replicas with
   `strategy.reduce`, which cannot convert a multi-worker `PerReplica`. Building
   needs only the shapes of the local batch.
2. `reduce_per_replica` averages a step's logs with `strategy.reduce("MEAN", v,
   axis=0)`; the logs are scalars, so there is no axis 0 across workers. The
   mean over replicas (`axis=None`) is what it means.
3. `steps_per_execution > 1` puts the step's collectives in a nested
   `tf.function` inside a `while_loop`, which fails across workers (as in
   keras-team/keras#19246 on one machine). One step per execution runs.

`enable_multi_worker()` patches exactly those three, only for the tested Keras
versions, and each patch changes nothing unless the model's strategy is
multi-worker MultiWorkerMirroredStrategy. `disable_multi_worker()` restores
Keras's own functions. tfdist's multi_worker_mirrored strategy enables it when
it is created; `tests/internals/test_keras.py` keeps a run of raw Keras 3
failing, so the day upstream fixes it is noticed.

Keras 3 variables under ParameterServerStrategy: `Variable.assign_add` is
`assign(self + value)`, a read then a write, so two workers adding at once lose
one update. `enable_atomic_assign_add()` routes it to the TF variable's own
`assign_add`, which the ps task applies atomically.

Keras 3 variables sharded over parameter servers (`num_ps_shards > 1`: the TF
variable a Keras variable wraps is a `ShardedVariable`) train when gradients
and updates go to the shards, as tf_keras lists them (`tfdist.training.loop` does), but
a checkpoint fails: Keras hands the `ShardedVariable` itself to TF's saver as
a tensor ("'ShardedVariable' object has no attribute 'device'").
`enable_sharded_checkpoints()` saves the whole value instead, read from the shards,
under the same name an unsharded variable uses, so a checkpoint restores into
any sharding or none (restoring already splits the value over the shards).

Every patch is `enable_<name>()` (idempotent; it returns whether the patch is
in place) with its undo `disable_<name>()`, and applies only to the tested
Keras versions (`TESTED`): on others it logs one line naming the version and
changes nothing. `PATCHES` names the public issue behind each.
"""

import contextlib
import logging
import weakref
from typing import Any, Callable, Iterator, Optional, Tuple

from tfdist.internals import tensorflow as tf_internals
from tfdist.internals import frames
from tfdist.internals import versions

logger = logging.getLogger("tfdist")

# Inclusive range of Keras minor versions these patches were run with: `make test` runs
# 3.15, and `make test-versions` 3.12 beside TensorFlow 2.17 and the 3.16 nightly beside
# 2.22. Not 3.11 and older: their epoch iterator yields two values a step, not three, and
# the patched step function fails on 3.10 ("not enough values to unpack").
TESTED = ((3, 12), (3, 16))
ISSUE = "keras-team/keras#20585"
# Patch -> the public issue it works around.
PATCHES = {
    "multi_worker": ISSUE,
    # Keras 3's Variable.assign_add is a read then a write; no upstream issue
    # names the race under parameter servers; Keras 3's own fit does not run
    # there at all (keras-team/keras#18624).
    "atomic_assign_add": "keras-team/keras#18624",
    # Keras 3 hands a ShardedVariable to TF's saver as a tensor; sharded
    # variables are TF's design (tensorflow/community#291).
    "sharded_checkpoints": "tensorflow/community#291",
    # A distributed iterator cannot be checkpointed, so a resumed fit replays
    # its input (tensorflow/tensorflow#56372).
    "input_replay": "tensorflow/tensorflow#56372",
    # Keras 3 optimizers always all-reduce under tf.distribute; tf_keras's
    # skip_gradients_aggregation is gone (keras-team/keras#19308). Local SGD
    # applies each replica's own gradients.
    "local_updates": "keras-team/keras#19308",
}
_WITHOUT = {
    "multi_worker": "Keras 3 `fit` under multi_worker_mirrored with 2 or more workers is "
                    "refused before its first step (Keras itself fails there); tf_keras trains",
    "atomic_assign_add": "Keras 3 under parameter servers (tfdist.training.loop) is refused: "
                         "concurrent workers could lose updates of a counter",
    "sharded_checkpoints": "a Keras 3 checkpoint of variables sharded over ps tasks fails",
    "input_replay": "a resumed Keras 3 `fit` reads the interrupted epoch again from its start",
    "local_updates": "local SGD and DiLoCo refuse a Keras 3 optimizer",
}
# Patch -> its gate (`tfdist doctor` reports each).
GATES = {patch: versions.Gate(
    {"multi_worker": "Keras 3 multi-worker workaround"}.get(patch, f"Keras 3 {patch} patch"),
    "Keras", TESTED, issue, _WITHOUT[patch])
         for patch, issue in PATCHES.items()}
# The module whose import `tfdist launch`'s task site waits for, to enable_multi_worker().
TRAINER_MODULE = "keras.src.backend.tensorflow.trainer"

# What each patch replaced, to put back: (owner, name) -> function; name -> function.
_originals = {}
_assign_originals = {}
_checkpoint_originals = {}


def keras_version() -> Optional[Tuple[int, int]]:
  """(major, minor) of the installed Keras 3, or None if there is none."""
  try:
    # Not `keras.__version__`: this also runs while `import keras` is under way.
    from keras.src.version import __version__ as version
  except ImportError:
    return None
  major, minor = (int(part) for part in version.split(".")[:2])
  return (major, minor) if major == 3 else None


def unsupported_reason(version: Optional[Tuple[int, int]] = None,
                       patch: str = "multi_worker") -> Optional[str]:
  """Why `patch` is not applied for `version` (default: installed), or None."""
  version = version if version is not None else keras_version()
  if version is None:
    return "Keras 3 is not installed"
  return GATES[patch].reason(version)


def _may_patch(patch: str) -> bool:
  """Whether `patch` applies to the installed Keras; logs why not (a warning) if Keras 3 is there."""
  version = keras_version()
  if version is None:
    return False
  reason = unsupported_reason(version, patch)
  if reason:
    logger.warning(reason)
  return reason is None


def is_enabled() -> bool:
  return bool(_originals)


def enable_multi_worker() -> bool:
  """Lets Keras 3 `fit`, `evaluate` and `predict` run under multi-worker MWMS.

  Idempotent. Outside the tested versions it logs one line naming the version
  and patches nothing.

  Returns:
    Whether the workaround is in place.
  """
  if _originals:
    return True
  if not _may_patch("multi_worker"):
    return False
  from keras.src.backend.tensorflow import trainer
  if _originals:  # Importing Keras ran `tfdist launch`'s shim, which enabled it already.
    return True
  cls = trainer_class(trainer)
  _originals.update({
      (trainer, "reduce_per_replica"): trainer.reduce_per_replica,
      (cls, "_maybe_symbolic_build"): cls._maybe_symbolic_build,
      (cls, "fit"): cls.fit,
      (cls, "evaluate"): cls.evaluate,
      (cls, "predict"): cls.predict,
  })
  trainer.reduce_per_replica = _reduce_per_replica
  cls._maybe_symbolic_build = _maybe_symbolic_build
  for name in ("fit", "evaluate", "predict"):
    setattr(cls, name, _one_step_per_execution(_originals[(cls, name)]))
  return True


def disable_multi_worker() -> None:
  """Puts Keras's own functions back."""
  for (owner, name), original in _originals.items():
    setattr(owner, name, original)
  _originals.clear()


@contextlib.contextmanager
def multi_worker() -> Iterator[bool]:
  """`enable_multi_worker()` for the block only, if it was not enabled before."""
  was_enabled = is_enabled()
  try:
    yield enable_multi_worker()
  finally:
    if not was_enabled:
      disable_multi_worker()


def _original(owner, name):
  return _originals[(owner, name)]


def trainer_class(trainer):
  """Keras's TensorFlow trainer in `keras.src.backend.tensorflow.trainer`.

  Keras 3.16 renamed `TensorFlowTrainer` to `Trainer` (keras-nightly
  3.16.0.dev2026102704, which TensorFlow 2.22.0rc0 installs); the methods patched
  here kept their names and code (`make test-newest` runs them there).
  """
  return getattr(trainer, "TensorFlowTrainer", None) or trainer.Trainer


def _reduce_per_replica(values, strategy, reduction):
  from keras.src.backend.tensorflow import trainer
  original = _original(trainer, "reduce_per_replica")
  if not tf_internals.is_multi_worker_mirrored(strategy) or reduction not in ("auto", "mean"):
    return original(values, strategy, reduction)
  import tensorflow as tf
  from keras.src import tree
  # Workaround 2 (keras-team/keras#20585): the mean over replicas, not over an axis.
  return tree.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None)
                            if isinstance(v, tf.distribute.DistributedValues) else v, values)


def _maybe_symbolic_build(self, iterator=None, data_batch=None):
  from keras.src.backend.tensorflow import trainer
  original = _original(trainer_class(trainer), "_maybe_symbolic_build")
  strategy = distribute_strategy(self)
  if iterator is None or strategy is None or not tf_internals.is_multi_worker_mirrored(strategy):
    return original(self, iterator=iterator, data_batch=data_batch)
  import tensorflow as tf
  from keras.src import tree
  # Workaround 1 (keras-team/keras#20585): build from this worker's first
  # replica's batch. Like Keras, take one batch from the iterator, which the
  # caller resets.
  for _, _, it in iterator:
    batch = next(it)
    break
  local = tree.map_structure(lambda v: strategy.experimental_local_results(v)[0]
                             if isinstance(v, tf.distribute.DistributedValues) else v, batch)
  return original(self, data_batch=local)


def _one_step_per_execution(method):
  def wrapper(self, *args, **kwargs):
    strategy = distribute_strategy(self)
    steps = getattr(self, "steps_per_execution", 1)
    if steps == 1 or strategy is None or not tf_internals.is_multi_worker_mirrored(strategy):
      return method(self, *args, **kwargs)
    # Workaround 3: the while_loop of k steps fails across workers.
    logger.warning(
        "Keras 3 cannot run steps_per_execution > 1 under multi-worker "
        "MultiWorkerMirroredStrategy (%s); running 1 step per execution. "
        "Received: steps_per_execution=%d", ISSUE, steps)
    self.steps_per_execution = 1
    try:
      return method(self, *args, **kwargs)
    finally:
      self.steps_per_execution = steps
  wrapper.__wrapped__ = method
  wrapper.__name__ = method.__name__
  wrapper.__doc__ = method.__doc__
  return wrapper


# --- Keras 3 optimizers that apply each replica's own gradients ----------------

def enable_local_updates(optimizer) -> bool:
  """Makes this Keras 3 `optimizer` apply each replica's gradients without the all-reduce.

  Keras 3's TensorFlow optimizer sums the gradients across replicas in every
  `apply` (`TFOptimizer._all_reduce_sum_gradients`), with no switch like
  tf_keras's `skip_gradients_aggregation` (keras-team/keras#19308). Local
  SGD (`tfdist.training.local_sgd`) needs each replica to step on its own:
  on this optimizer instance only, the sum is left out; every replica's
  update still goes through the strategy (`extended.update`) to its own copy.
  """
  if not _may_patch("local_updates"):
    return False
  optimizer._all_reduce_sum_gradients = _own_gradients  # pylint: disable=protected-access
  return True


def disable_local_updates(optimizer) -> None:
  """Puts the optimizer's own all-reduce back."""
  if vars(optimizer).get("_all_reduce_sum_gradients") is _own_gradients:
    del optimizer._all_reduce_sum_gradients  # pylint: disable=protected-access


def _own_gradients(grads_and_vars):
  return list(grads_and_vars)


# --- Keras 3 variables on parameter servers ---------------------------------

def enable_atomic_assign_add() -> bool:
  """Makes Keras 3's `Variable.assign_add`/`assign_sub` the TF variable's own.

  Keras 3 implements them as `assign(self + value)`, so concurrent workers of a
  ParameterServerStrategy overwrite each other's updates (an optimizer's
  iteration counter, a metric's total). TF's `assign_add` runs as one op on the
  ps task. Idempotent; returns whether it is in place.
  """
  if _assign_originals:
    return True
  if not _may_patch("atomic_assign_add"):
    return False
  from keras.src.backend import common
  from keras.src.backend.tensorflow import core
  cls = core.Variable
  _assign_originals.update({"assign_add": cls.assign_add, "assign_sub": cls.assign_sub})

  def atomic(name):
    original = _assign_originals[name]

    def update(self, value):
      if common.stateless_scope.in_stateless_scope():
        return original(self, value)  # Keras collects these updates itself.
      value = self._convert_to_tensor(value, dtype=self._dtype)
      return getattr(self._value, name)(value)
    return update

  assign_add, assign_sub = atomic("assign_add"), atomic("assign_sub")
  cls.assign_add, cls.assign_sub = assign_add, assign_sub
  return True


def _restore_variable_methods(originals: dict) -> None:
  """Puts Keras's own `Variable` methods back from `originals`, and empties it."""
  if not originals:
    return
  from keras.src.backend.tensorflow import core
  for name, original in originals.items():
    setattr(core.Variable, name, original)
  originals.clear()


def disable_atomic_assign_add() -> None:
  _restore_variable_methods(_assign_originals)


def enable_sharded_checkpoints() -> bool:
  """Lets a Keras 3 variable whose TF variable is a `ShardedVariable` be checkpointed.

  It is saved whole (the shards concatenated) under the key an unsharded Keras
  variable uses; other variables are saved as before. Idempotent; returns
  whether it is in place.
  """
  if _checkpoint_originals:
    return True
  if not _may_patch("sharded_checkpoints"):
    return False
  import tensorflow as tf
  from keras.src.backend.tensorflow import core
  sharded = tf.__internal__.distribute.ShardedVariable
  cls = core.Variable
  _checkpoint_originals.update({"_serialize_to_tensors": cls._serialize_to_tensors,
                                "_restore_from_tensors": cls._restore_from_tensors})

  def serialize(self):
    if isinstance(self.value, sharded):
      # Keras would pass the ShardedVariable on as if it were a tensor.
      return {"VARIABLE_VALUE": tf.convert_to_tensor(self.value)}
    return _checkpoint_originals["_serialize_to_tensors"](self)

  def restore(self, restored_tensors):
    if isinstance(self.value, sharded):
      # Keras's own `assign` checks the shape, unknown here (TF restores
      # across tasks inside a tf.function); the ShardedVariable slices it.
      value = tf.ensure_shape(restored_tensors["VARIABLE_VALUE"], self.value.shape)
      return self.value.assign(tf.cast(value, self.value.dtype))
    return _checkpoint_originals["_restore_from_tensors"](self, restored_tensors)

  cls._serialize_to_tensors, cls._restore_from_tensors = serialize, restore
  return True


def disable_sharded_checkpoints() -> None:
  _restore_variable_methods(_checkpoint_originals)


# --- what tfdist reads of Keras 3 objects ------------------------------------

def flatten_layers(model, include_self: bool = False) -> list:
  """Every layer inside `model`, recursively (either Keras: neither has a public list)."""
  return list(model._flatten_layers(include_self=include_self))


def distribute_strategy(model):
  """The strategy `model` was built under, or None (Keras 3 keeps it privately)."""
  return getattr(model, "_distribute_strategy", None)


def initial_epoch(model) -> int:
  """The epoch Keras 3's BackupAndRestore restored `model` to (0 if none)."""
  return getattr(model, "_initial_epoch", None) or 0


_BACKUP_PATHS = ("backup_dir", "_weights_path", "_training_metadata_path",
                 "_prev_weights_path", "_prev_training_metadata_path")


@contextlib.contextmanager
def backup_written_to(callback, write_dir: str) -> Iterator[None]:
  """Keras 3's BackupAndRestore writes into `write_dir` in the block, not its backup_dir.

  Its paths are private attributes derived from `backup_dir` at construction;
  they are put back when the block ends.
  """
  paths = tuple(getattr(callback, name) for name in _BACKUP_PATHS)
  backup_dir = paths[0]
  try:
    for name, path in zip(_BACKUP_PATHS, paths):
      setattr(callback, name, path.replace(backup_dir, write_dir, 1))
    yield
  finally:
    for name, path in zip(_BACKUP_PATHS, paths):
      setattr(callback, name, path)


def save_backup(callback, epoch: int, batch: Optional[int] = None) -> None:
  """Keras 3's BackupAndRestore saves its backup now, recording `epoch` and `batch`.

  `epoch` is the one a restart begins with; `batch` the last one trained in it
  (None: none). Keras records the epoch only at epoch ends, so a backup in the
  first epoch of a resumed fit would otherwise record epoch 0.
  """
  callback._current_epoch = epoch
  callback._last_batch_seen = -1 if batch is None else batch
  callback._save_model()


def saved_batch(callback) -> int:
  """The last batch trained in the epoch a restored backup resumes (-1: none); after on_train_begin."""
  import json
  path = callback._training_metadata_path
  import tensorflow as tf
  if not tf.io.gfile.exists(path):
    return -1
  with tf.io.gfile.GFile(path) as f:
    return int(json.load(f).get("batch", -1))


# --- Exact resume of fit's input. Keras 3 resumes a backup at its epoch's start,
# from a new iterator drawn as the resumed fit's first: the first epoch's
# shuffle order. For the running fit only, its epoch iterator first makes the
# iterators the interrupted run had made, through Keras's own per-epoch code
# (each draws the next epoch's order from the dataset's seed), and then reads
# past the batches trained on, so the backup's batch is where training goes on.

_replaying = weakref.WeakSet()  # The epoch iterators whose method is replaced.


def enable_input_replay(epoch: int, batch: int, skip: Callable[[Any, int], Any]):
  """Makes the running `fit` read its input from `epoch`, after `batch`; from `on_train_begin`.

  Args:
    epoch: the epoch the backup resumes (0-based; 0 and `batch` -1: a fresh start).
    batch: the last batch trained in it, -1 for none.
    skip: `skip(iterator, n)` reads and drops `n` batches of `iterator`.

  Returns:
    (the user's dataset, why its position cannot be restored or None); (None,
    None) if nothing was replaced (an untested Keras, or no running `fit`).
  """
  if not _may_patch("input_replay"):
    return None, None
  import keras
  epoch_iterator = frames.running_local(keras.Model.fit, "epoch_iterator")
  if epoch_iterator is None:
    return None, None
  dataset = getattr(epoch_iterator.data_adapter, "_dataset", None)
  steps, known = epoch_iterator.steps_per_epoch, epoch_iterator._num_batches
  if steps is None and known is None:
    return dataset, "its length is unknown (tf.data cannot tell its cardinality)"
  if steps is not None and known is not None:
    return dataset, "steps_per_epoch is given for finite data; repeat() it, or leave it out"
  if not epoch and batch < 0:
    return dataset, None
  original = epoch_iterator._enumerate_iterator

  def enumerate_iterator():
    del epoch_iterator._enumerate_iterator  # Once: the epochs after it are Keras's own.
    _replaying.discard(epoch_iterator)
    ahead = 0
    if steps is None:  # A new iterator each epoch: make, but do not read, the ones before.
      for _ in range(epoch):
        for _ in original():
          pass
    else:  # One iterator for the whole fit: read past the epochs before.
      ahead = epoch * steps
    for begin, end, iterator in original():
      if begin <= batch:  # Trained on before the backup: read, not trained on again.
        ahead += end - begin + 1
        continue
      if ahead:
        skip(iterator, ahead)
        ahead = 0
      yield begin, end, iterator

  epoch_iterator._enumerate_iterator = enumerate_iterator
  _replaying.add(epoch_iterator)
  return dataset, None


def disable_input_replay() -> None:
  """Puts the epoch iterators' own method back where a fit ended before using it."""
  for epoch_iterator in list(_replaying):
    vars(epoch_iterator).pop("_enumerate_iterator", None)
  _replaying.clear()
