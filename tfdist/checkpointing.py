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
import signal
import threading
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


# Exit code of a task that saved a backup after SIGTERM: 128 + SIGTERM, as a
# shell reports it, which Kubeflow's ExitCode restart policy treats as retryable.
PREEMPTED_EXIT_CODE = 128 + signal.SIGTERM
# An integer save_freq makes Keras resume at the saved batch, not at the start
# of the epoch; this one is too large for Keras itself to ever save mid-epoch.
_NEVER = 2**62


class BackupAndRestore(tf_keras.callbacks.BackupAndRestore):
  """Keras's `BackupAndRestore`, plus a backup when the task gets SIGTERM.

  Backs up at the end of every epoch. When SIGTERM arrives (what SLURM and
  Kubernetes send before they stop a task), it backs up at the next check
  (every `check_every` batches), prints where, and exits with
  `PREEMPTED_EXIT_CODE`. A restarted job resumes at the next batch. Under
  MultiWorkerMirroredStrategy the workers agree through an all-reduce, so a
  SIGTERM to any one worker makes all of them save at the same step.

  tf_keras's own `save_before_preemption` only works on Google Cloud
  (`distributed_file_utils.support_on_demand_checkpoint_callback`); this works
  anywhere. Under ParameterServerStrategy Keras keeps no batch counters, so
  there a job resumes at the last finished epoch.
  """

  def __init__(self, backup_dir: str, *, check_every: int = 10):
    super().__init__(backup_dir, save_freq=_NEVER, delete_checkpoint=True)
    # Keras lists the strategies it tested; a checkpoint works the same under
    # these two single-machine ones (tests/test_checkpointing.py).
    self._supported_strategies += (tf.distribute.OneDeviceStrategy,
                                   tf.distribute.experimental.CentralStorageStrategy)
    if not isinstance(check_every, int) or check_every < 1:
      raise ValueError(f"`check_every` must be an integer >= 1. Received: {check_every!r}")
    self.check_every = check_every
    self._terminated = False
    self._previous_handler = None
    self._agree = None

  def on_train_begin(self, logs=None):
    pss = isinstance(self.model.distribute_strategy, tf.distribute.ParameterServerStrategy)
    # Keras counts no batches under PSS, so only epoch-level resume works there.
    self.save_freq = "epoch" if pss else _NEVER
    super().on_train_begin(logs)
    state = self._training_state
    epoch, batch = int(state._ckpt_saved_epoch.numpy()), int(state._ckpt_saved_batch.numpy())
    if epoch >= 0:
      print(f"BackupAndRestore: resuming after epoch {epoch + 1}, batch {batch + 1} "
            f"(from {self.backup_dir})", flush=True)
    if threading.current_thread() is threading.main_thread():
      self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
    strategy = self.model.distribute_strategy
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
      self._agree = _any_worker(strategy)

  def _on_sigterm(self, signum, frame):
    self._terminated = True

  def _restore_handler(self):
    if self._previous_handler is not None:
      signal.signal(signal.SIGTERM, self._previous_handler)
      self._previous_handler = None

  def on_train_batch_end(self, batch, logs=None):
    super().on_train_batch_end(batch, logs)
    if (batch + 1) % self.check_every == 0:
      self._maybe_exit(f"batch {batch + 1}")

  def on_epoch_end(self, epoch, logs=None):
    self._backup(epoch=epoch)
    self._maybe_exit("its last batch")

  def on_train_end(self, logs=None):
    self._restore_handler()
    super().on_train_end(logs)

  def _maybe_exit(self, where: str) -> None:
    terminated = self._terminated
    if self._agree is not None:
      terminated = bool(self._agree(tf.constant(float(terminated))).numpy())
    if not terminated or isinstance(self.model.distribute_strategy,
                                    tf.distribute.ParameterServerStrategy):
      return
    self._backup(epoch=self._current_epoch)
    self._restore_handler()
    print(f"BackupAndRestore: SIGTERM: backed up epoch {self._current_epoch + 1} after "
          f"{where} to {self.backup_dir}; exiting with code {PREEMPTED_EXIT_CODE}. "
          "Run the same job again to resume.", flush=True)
    raise SystemExit(PREEMPTED_EXIT_CODE)


def _any_worker(strategy: tf.distribute.Strategy):
  """A function: whether any worker's flag is set (one scalar all-reduce)."""

  @tf.function
  def agree(flag):
    total = strategy.run(lambda x: tf.distribute.get_replica_context().all_reduce(
        tf.distribute.ReduceOp.SUM, tf.identity(x)), args=(flag,))
    return strategy.experimental_local_results(total)[0] > 0

  return agree


def backup_and_restore(checkpoint_dir: str, *, check_every: int = 10) -> BackupAndRestore:
  """`BackupAndRestore` in `checkpoint_dir/backup`.

  After an interruption, the same `fit` call resumes from the last finished
  epoch, or from the batch where SIGTERM stopped it. The backup is deleted when
  training finishes.
  """
  return BackupAndRestore(os.path.join(checkpoint_dir, BACKUP_SUBDIR), check_every=check_every)
