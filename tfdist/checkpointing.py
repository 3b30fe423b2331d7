"""Saving exactly once, and resuming after an interruption, under any strategy.

Under MultiWorkerMirroredStrategy every worker must take part in a save (it may
run collectives), but if all of them write to the same path they race and
corrupt it. TF's answer, which tf_keras's own callbacks use, is that the chief
writes to the real path and every other worker to a temporary directory that
is removed right after. These helpers apply it to the final model and to
TensorBoard logs, and wire Keras's `BackupAndRestore` for resuming.

Example:

>>> callbacks = [checkpointing.backup_and_restore(checkpoint_dir)]
>>> model.fit(..., callbacks=callbacks)      # a restarted job resumes here
>>> checkpointing.save_model(model, os.path.join(checkpoint_dir, "model.keras"))
"""

import contextlib
import os
from typing import Iterator, Optional

import tensorflow as tf
import tf_keras
# TF's chief-writes, others-write-to-temp rule, as tf_keras's ModelCheckpoint and
# BackupAndRestore use it.
from tf_keras.src.distribute import distributed_file_utils

BACKUP_SUBDIR = "backup"


def _strategy(strategy: Optional[tf.distribute.Strategy]) -> tf.distribute.Strategy:
  return strategy or tf.distribute.get_strategy()


def is_chief(strategy: Optional[tf.distribute.Strategy] = None) -> bool:
  """Whether this task is the one whose files count (single process: yes)."""
  return _strategy(strategy).extended.should_checkpoint


def save_model(model: tf_keras.Model, path: str,
               strategy: Optional[tf.distribute.Strategy] = None) -> Optional[str]:
  """Saves `model` to `path` once: on the chief; other workers' copies are removed.

  Call it on every worker.

  Returns:
    `path` on the chief, None on the other workers.
  """
  strategy = _strategy(strategy)
  write_path = distributed_file_utils.write_filepath(path, strategy)
  model.save(write_path)
  distributed_file_utils.remove_temp_dir_with_filepath(write_path, strategy)
  return path if write_path == path else None


@contextlib.contextmanager
def chief_dir(path: str, strategy: Optional[tf.distribute.Strategy] = None) -> Iterator[str]:
  """A directory to write into: `path` on the chief, a temporary one elsewhere.

  The temporary one is removed when the block ends, e.g. for TensorBoard logs.
  """
  strategy = _strategy(strategy)
  write_dir = distributed_file_utils.write_dirpath(path, strategy)
  try:
    yield write_dir
  finally:
    distributed_file_utils.remove_temp_dirpath(write_dir, strategy)


def backup_and_restore(checkpoint_dir: str, *, save_freq="epoch",
                       save_before_preemption: bool = False) -> tf_keras.callbacks.Callback:
  """Keras's `BackupAndRestore` in `checkpoint_dir/backup`.

  After an interruption, the same `fit` call resumes from the last finished
  epoch (or `save_freq` batches). The backup is deleted when training finishes.
  `save_before_preemption` also saves when the platform announces a preemption,
  where TF supports it.
  """
  return tf_keras.callbacks.BackupAndRestore(
      os.path.join(checkpoint_dir, BACKUP_SUBDIR), save_freq=save_freq,
      delete_checkpoint=True, save_before_preemption=save_before_preemption)
