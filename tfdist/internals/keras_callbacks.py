"""Keras 3's own file-writing callbacks under multi-worker strategies: written once.

Keras 3's `BackupAndRestore`, `ModelCheckpoint` and `TensorBoard` have no
chief logic (tf_keras's have, in `distributed_file_utils`): under
MultiWorkerMirroredStrategy every worker writes the same folder and files,
and a 2-worker `fit` with `BackupAndRestore` fails at its first backup
(`FileExistsError`, or an HDF5 file lock), while two workers writing one
`.keras` file or one event folder race. No upstream issue tracks it; it is
part of Keras 3's missing multi-worker support (keras-team/keras#20585), and
tensorflow/tensorflow#31070 is the race tf_keras's rule avoids.

`enable_chief_writes()` applies TF's rule to the three classes
(`tfdist.internals.tensorflow.chief_dir`): every worker still writes (a save
may read across workers), the chief to the real path, every other worker into
a temporary folder removed right after; every worker restores from the
chief's backup, and only the chief deletes it at the end, after a barrier.
`BackupAndRestore` also records where it backed up (the running epoch, and
the last batch trained, -1 at an epoch's end: Keras records epoch 0 for a
backup in a resumed fit's first epoch, and batch 0 at an epoch's end), and
hands that to `on_restore(callback, epoch, batch)` when `fit` starts, so the
caller can replay the input (`tfdist.task._keras`).

Nothing changes for a model that is not under multi-worker
MultiWorkerMirroredStrategy (its writes go where Keras puts them), nor for
tfdist's own subclass (`_tfdist_own`), which does this itself. Gated on the
Keras versions tested (`TESTED`); `disable_chief_writes()` is the undo.
"""

import contextlib
import json
import logging
from typing import Callable, Optional

from tfdist.internals import keras as keras_internals
from tfdist.internals import tensorflow as tf_internals
from tfdist.internals import versions

logger = logging.getLogger("tfdist")

# Written against Keras 3.15's callbacks; run with 3.12 to 3.16 (`make test-versions`).
TESTED = ((3, 12), (3, 16))
PATCHES = {"chief_writes": "keras-team/keras#20585"}
GATES = {"chief_writes": versions.Gate(
    "Keras 3 chief-only callback writes", "Keras", TESTED, PATCHES["chief_writes"],
    "Keras 3's BackupAndRestore, ModelCheckpoint and TensorBoard write from every worker of a "
    "multi-worker fit (FileExistsError, or an HDF5 lock)")}
# The module whose import `tfdist launch`'s task site waits for: it defines all three classes.
CALLBACKS_MODULE = "keras.src.callbacks"

_originals = {}  # (class, name) -> Keras's own function, or None where the class had none.


def _multi_worker(callback) -> bool:
  model = getattr(callback, "model", None)
  strategy = keras_internals.distribute_strategy(model) if model is not None else None
  return (strategy is not None and tf_internals.is_multi_worker_mirrored(strategy)
          and not getattr(callback, "_tfdist_own", False))


def _strategy(callback):
  return keras_internals.distribute_strategy(callback.model)


def enable_chief_writes(on_restore: Optional[Callable[[object, int, int], None]] = None) -> bool:
  """Makes Keras 3's BackupAndRestore, ModelCheckpoint and TensorBoard write once, from the chief.

  Args:
    on_restore: called as `on_restore(callback, epoch, batch)` in a
      `BackupAndRestore`'s `on_train_begin` under multi-worker
      MultiWorkerMirroredStrategy, after Keras restored the backup: the epoch
      `fit` resumes (0-based) and the last batch trained in it (-1: none);
      (0, -1) for a fresh start.

  Returns:
    Whether the patch is in place (False on an untested Keras, with a warning).

  Example:

      enable_chief_writes()
      model.fit(data, callbacks=[keras.callbacks.BackupAndRestore("/shared/backup")])
  """
  if _originals:
    return True
  version = keras_internals.keras_version()
  if version is None or not GATES["chief_writes"].check(version):
    return False
  from keras.src import callbacks
  _patch_backup(callbacks.BackupAndRestore, on_restore)
  _patch_checkpoint(callbacks.ModelCheckpoint)
  _patch_tensorboard(callbacks.TensorBoard)
  return True


def disable_chief_writes() -> None:
  """Puts Keras's own methods back."""
  for (cls, name), original in _originals.items():
    if original is None:
      delattr(cls, name)
    else:
      setattr(cls, name, original)
  _originals.clear()


def is_enabled() -> bool:
  return bool(_originals)


def _replace(cls, name, make):
  original = vars(cls).get(name)
  _originals[(cls, name)] = original
  inherited = getattr(cls, name)
  setattr(cls, name, make(inherited))


# --- BackupAndRestore --------------------------------------------------------

def _patch_backup(cls, on_restore):
  def on_train_begin(original):
    def patched(self, logs=None):
      original(self, logs)  # Every worker restores the chief's backup.
      self._tfdist_position = (0, -1)
      if not _multi_worker(self):
        return
      epoch = keras_internals.initial_epoch(self.model)
      batch = _saved_batch(self)
      steps = (self.params or {}).get("steps")
      if steps and batch >= steps - 1:
        # Backed up after its epoch's last batch: the next epoch is where to go on (fit
        # reads the model's initial epoch after on_train_begin).
        epoch, batch = epoch + 1, -1
        self.model._initial_epoch = epoch
      self._tfdist_position = (epoch, batch)
      if on_restore is not None:  # A fresh start too: (0, -1).
        on_restore(self, epoch, batch)
    return patched

  def on_epoch_begin(original):
    def patched(self, epoch, logs=None):
      self._tfdist_position = (epoch, -1)
      return original(self, epoch, logs)
    return patched

  def on_train_batch_end(original):
    def patched(self, batch, logs=None):
      self._tfdist_position = (getattr(self, "_tfdist_position", (0, -1))[0], batch)
      return original(self, batch, logs)
    return patched

  def on_epoch_end(original):
    def patched(self, epoch, logs=None):
      self._tfdist_position = (epoch + 1, -1)  # A restart begins the next epoch.
      return original(self, epoch, logs)
    return patched

  def save_model(original):
    def patched(self):
      if not _multi_worker(self):
        return original(self)
      epoch, batch = getattr(self, "_tfdist_position", (0, -1))
      counted = self._last_batch_seen  # Keras counts batches with it: put back after.
      # What the backup records: where the running fit is, not Keras's epoch counter.
      self._current_epoch, self._last_batch_seen = epoch, batch
      try:
        # The helper makes the folder: Keras's check-then-create races between workers.
        with tf_internals.chief_dir(self.backup_dir, _strategy(self)) as write_dir:
          with keras_internals.backup_written_to(self, write_dir):
            original(self)
            _mark_batch(self._training_metadata_path)
      finally:
        self._last_batch_seen = counted
    return patched

  def on_train_end(original):
    def patched(self, logs=None):
      if not _multi_worker(self):
        return original(self, logs)
      strategy = _strategy(self)
      # A barrier: every worker's last save is done before the chief deletes the backup.
      from tfdist import _barrier  # pylint: disable=import-outside-toplevel
      _barrier.barrier(strategy)
      if strategy.extended.should_checkpoint:  # One deleter, not a race.
        original(self, logs)
    return patched

  for name, make in (("on_train_begin", on_train_begin), ("on_epoch_begin", on_epoch_begin),
                     ("on_train_batch_end", on_train_batch_end), ("on_epoch_end", on_epoch_end),
                     ("_save_model", save_model), ("on_train_end", on_train_end)):
    _replace(cls, name, make)


# Keras records batch 0 at an epoch's end too; a backup whose batch tfdist recorded
# says so, and only its batch is read on after (others resume at their epoch's start).
_MARK = "batch_recorded_by"


def _mark_batch(metadata_path: str) -> None:
  import tensorflow as tf
  with tf.io.gfile.GFile(metadata_path) as f:
    metadata = json.load(f)
  metadata[_MARK] = "tfdist"
  with tf.io.gfile.GFile(metadata_path, "w") as f:
    json.dump(metadata, f)


def _saved_batch(callback) -> int:
  """The last batch trained in the epoch a restored backup resumes (-1: none, or not recorded)."""
  import tensorflow as tf
  path = callback._training_metadata_path
  if not tf.io.gfile.exists(path):
    return -1
  with tf.io.gfile.GFile(path) as f:
    metadata = json.load(f)
  return int(metadata.get("batch", -1)) if metadata.get(_MARK) == "tfdist" else -1


# --- ModelCheckpoint ---------------------------------------------------------

def _patch_checkpoint(cls):
  def save_model(original):
    def patched(self, epoch, batch, logs):
      if not _multi_worker(self):
        return original(self, epoch, batch, logs)
      path = self._get_file_path(epoch, batch, logs)
      with tf_internals.chief_file(path, _strategy(self)) as write_path:
        if write_path == path:
          return original(self, epoch, batch, logs)
        # This worker's copy goes to the temporary folder: Keras asks for the path here.
        self._get_file_path = lambda *args: write_path
        try:
          return original(self, epoch, batch, logs)
        finally:
          del self._get_file_path
    return patched

  _replace(cls, "_save_model", save_model)


# --- TensorBoard -------------------------------------------------------------

def _patch_tensorboard(cls):
  def set_model(original):
    def patched(self, model):
      strategy = keras_internals.distribute_strategy(model)
      if not (strategy is not None and tf_internals.is_multi_worker_mirrored(strategy)):
        return original(self, model)
      log_dir = self.log_dir
      # Keras derives every writer's folder from log_dir here, and writes the graph at once.
      self.log_dir = tf_internals.write_dirpath(log_dir, strategy)
      self._tfdist_log_dirs = (self.log_dir, log_dir)
      try:
        return original(self, model)
      finally:
        self.log_dir = log_dir
    return patched

  def on_train_end(original):
    def patched(self, logs=None):
      try:
        return original(self, logs)  # Closes the writers.
      finally:
        write_dir, log_dir = getattr(self, "_tfdist_log_dirs", (None, None))
        if write_dir is not None:
          tf_internals.remove_temp_dirpath(write_dir, log_dir)
    return patched

  _replace(cls, "set_model", set_model)
  _replace(cls, "on_train_end", on_train_end)


@contextlib.contextmanager
def chief_writes(on_restore=None):
  """`enable_chief_writes()` for the block only, if it was not enabled before."""
  was_enabled = is_enabled()
  try:
    yield enable_chief_writes(on_restore)
  finally:
    if not was_enabled:
      disable_chief_writes()
