"""Saving exactly once, and resuming after an interruption, under any strategy.

Under MultiWorkerMirroredStrategy every worker must take part in a save (it may
run collectives), but if all of them write to the same path they race and
corrupt it. TF's answer, which tf_keras's own callbacks use, is that the chief
writes to the real path and every other worker to a temporary directory that
is removed right after. These helpers apply it to the final model and to
TensorBoard logs, and wire Keras's `BackupAndRestore` for resuming.

Example:

    >>> callbacks = [checkpoints.backup_and_restore(checkpoint_dir)]
    >>> model.fit(..., callbacks=callbacks)      # a restarted job resumes here
    >>> checkpoints.save_model(model, os.path.join(checkpoint_dir, "model.keras"))
"""

import contextlib
import functools
import inspect
import logging
import os
import signal
import socket
import threading
import time
from typing import Iterator, Optional

import tensorflow as tf

from tfdist import _barrier as barrier
from tfdist import _folders as folders
from tfdist import _keras_support as keras_support
from tfdist.cluster import _grace as grace
from tfdist.data import replay
from tfdist.internals import keras as keras_internals
from tfdist.internals import tensorflow as tf_internals
from tfdist.internals import tf_keras as tf_keras_internals
from tfdist.training import _local_sgd as local_sgd
from tfdist.training import preemption

logger = logging.getLogger("tfdist")

BACKUP_SUBDIR = "backup"


def _strategy(strategy: Optional[tf.distribute.Strategy]) -> tf.distribute.Strategy:
  return strategy or tf.distribute.get_strategy()


def is_chief(strategy: Optional[tf.distribute.Strategy] = None) -> bool:
  """Whether this task is the one whose files count (single process: yes)."""
  return _strategy(strategy).extended.should_checkpoint


def save_model(model, path: str,
               strategy: Optional[tf.distribute.Strategy] = None) -> Optional[str]:
  """Saves `model` to `path` once: on the chief; other workers' copies are removed.

  Call it on every worker.

  Returns:
    `path` on the chief, None on the other workers.
  """
  # The model's own strategy: outside `strategy.scope()` the current one is the default.
  strategy = strategy or getattr(model, "distribute_strategy", None) or _strategy(None)
  folders.makedirs(os.path.dirname(path) or ".")  # Its user's only, where tfdist makes it.
  with tf_internals.chief_file(path, strategy) as write_path:
    model.save(write_path)
  return path if write_path == path else None


@contextlib.contextmanager
def chief_dir(path: str, strategy: Optional[tf.distribute.Strategy] = None) -> Iterator[str]:
  """A directory to write into: `path` on the chief, a temporary one elsewhere.

  The temporary one is removed when the block ends, e.g. for TensorBoard logs.
  """
  folders.makedirs(path)  # Its user's only, where tfdist makes it.
  with tf_internals.chief_dir(path, _strategy(strategy)) as write_dir:
    yield write_dir

# Exit code of a task that backed up after SIGTERM (tfdist.training.preemption).
PREEMPTED_EXIT_CODE = preemption.PREEMPTED_EXIT_CODE
# The seconds between SIGTERM and SIGKILL (tfdist.cluster._grace).
GRACE_PERIOD_ENV = grace.GRACE_PERIOD_ENV
DEFAULT_GRACE_PERIOD = grace.DEFAULT_GRACE_PERIOD
grace_period = grace.grace_period
# An integer save_freq makes Keras resume at the saved batch, not at the start
# of the epoch; this one is too large for Keras itself to ever save mid-epoch.
_NEVER = 2**62


class _SigtermChecks:
  """SIGTERM during `fit` -> a backup at the next check, on every worker, then exit 143.

  Shared by both Kerases' backups; when to check, and what the workers agree,
  is `tfdist.training.preemption`'s `Schedule`. The host class gives
  `model`, `check_every`, `check_seconds`, `_fit_code()` (the code object of
  its Keras's `fit`) and `_exit_after_backup(where, batch=, backed_up=)`.
  """

  def _start_checks(self):
    self._terminated = False
    self._backup_seconds = None
    if threading.current_thread() is threading.main_thread():
      self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
    strategy = self.model.distribute_strategy
    agree = (preemption.any_worker(strategy)
             if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) else None)
    self._schedule = preemption.Schedule(agree, check_every=self.check_every,
                                         check_seconds=self.check_seconds)

  def _reset_checks(self):
    self._schedule.restart(0)

  def _on_sigterm(self, signum, frame):
    if _inside(frame, self._fit_code()):
      self._terminated = True
      return
    # fit is over but on_train_end never ran (it raised): hand the signal on.
    previous = self._restore_handler()
    if callable(previous):
      previous(signum, frame)
    elif previous != signal.SIG_IGN:
      signal.signal(signal.SIGTERM, signal.SIG_DFL)
      os.kill(os.getpid(), signal.SIGTERM)

  def _restore_handler(self):
    previous, self._previous_handler = self._previous_handler, None
    if previous is not None and signal.getsignal(signal.SIGTERM) == self._on_sigterm:
      signal.signal(signal.SIGTERM, previous)
    return previous

  def _check(self, batch: Optional[int]) -> None:
    """At the end of `batch` (None: of the epoch): exit after a backup if any task was told to."""
    if self._backup_seconds is None and batch is not None:
      self._measure_backup()  # At the first check: the optimizer's slots exist by now.
    if self._schedule.agreed(self._terminated, None if batch is None else batch + 1):
      where = "its last batch" if batch is None else f"batch {batch + 1}"
      # At an epoch's end, on_epoch_end has just backed up.
      self._exit_after_backup(where, batch=batch, backed_up=batch is None)

  def _check_due(self, batch: int) -> bool:
    return self._schedule.due(batch + 1)

  def _measure_backup(self) -> None:
    """Times a write of what a backup holds; warns if a SIGTERM backup would outlast the grace.

    Every worker writes at the same check (a save may read across workers),
    each into a scratch folder of its own beside the backup, removed at once.
    """
    scratch = f"{self.backup_dir}-grace-probe-{socket.gethostname()}-{os.getpid()}"
    start = time.monotonic()
    try:
      tf.io.gfile.makedirs(scratch)
      self._write_probe(scratch)
    finally:
      self._backup_seconds = time.monotonic() - start
      if tf.io.gfile.exists(scratch):
        tf.io.gfile.rmtree(scratch)
    seconds, source = grace_period()
    # Until the next check, then the backup itself.
    worst = self._backup_seconds + (0.0 if self.check_every else self.check_seconds)
    logger.info("BackupAndRestore: a backup takes %.2fs here; the grace period is %gs (%s)",
                self._backup_seconds, seconds, source)
    if worst > seconds:
      logger.warning(
          "A backup after SIGTERM would take about %.1fs here (%.1fs to write, measured now, "
          "plus up to %gs to the next check), more than the %gs grace period (%s) between "
          "SIGTERM and SIGKILL: a preempted task would be killed before its backup is "
          "written, and resume from its last epoch. Give the tasks a longer grace period "
          "(tfdist launch --grace_period, SLURM's KillWait, Kubernetes' "
          "terminationGracePeriodSeconds), or make the backup smaller.", worst,
          self._backup_seconds, worst - self._backup_seconds, seconds, source)


# tf_keras's callback; where Keras 3 is installed alone, making one says what to install.
class BackupAndRestore(_SigtermChecks, keras_support.tf_keras_base(
    "callbacks.BackupAndRestore", "tfdist.training.checkpoints.BackupAndRestore")):
  """Keras's `BackupAndRestore`, plus a backup when the task gets SIGTERM.

  Backs up at the end of every epoch. When SIGTERM arrives (what SLURM and
  Kubernetes send before they stop a task, 30 s before SIGKILL by default),
  it backs up at the next check, logs where, and exits with
  `PREEMPTED_EXIT_CODE`. Checks come about every `check_seconds` of training
  (or every `check_every` batches if given), so the backup fits in the grace
  period however long a step takes. Under MultiWorkerMirroredStrategy the
  workers agree through one small all-reduce per check, so a SIGTERM to any
  one worker makes all of them save at the same step, and all of them derive
  the next check's batch from the same reduced timing. A restarted job
  resumes at the next batch, and so does its input: the epoch's iterator is
  drawn in the interrupted run's shuffle order (the iterators made before it
  are made again, each drawing the next order from the dataset's seed) and
  reads past the batches already trained on, so the job ends with the weights
  an uninterrupted one would have. A pipeline that cannot be replayed (see
  `tfdist.data.replay`) is named in a warning when `fit` starts. Under
  ParameterServerStrategy Keras keeps no batch counters: the chief checks
  after every scheduled step, backs up the variables as they are, and a
  restarted job runs the interrupted epoch again from its start, with those
  variables.

  The handler is active only while `fit` runs: on SIGTERM outside `fit` (which
  ended, even by an exception that skipped `on_train_end`), the previous
  handler is put back and gets the signal.

  Why not TF's own preemption support: tf_keras's `save_before_preemption`
  works only on Google Cloud (`distributed_file_utils.
  support_on_demand_checkpoint_callback`), and
  `tf.distribute.experimental.PreemptionCheckpointHandler` needs a custom
  training loop around a `CheckpointManager` and does not support
  ParameterServerStrategy; this works with `fit`, anywhere.
  """

  def __init__(self, backup_dir: str, *, check_every: Optional[int] = None,
               check_seconds: float = 1.0):
    super().__init__(backup_dir, save_freq=_NEVER, delete_checkpoint=True)
    # Keras lists the strategies it tested; a checkpoint works the same under
    # these two single-machine ones (tests/training/test_checkpoints.py).
    tf_keras_internals.add_supported_strategies(
        self, tf.distribute.OneDeviceStrategy, tf.distribute.experimental.CentralStorageStrategy)
    preemption.check_arguments(check_every, check_seconds)
    self.check_every = check_every
    self.check_seconds = float(check_seconds)
    # Batch hooks never read the logs: no need to fetch them (under PSS they
    # are remote values, and fetching would wait for every step).
    tf_keras_internals.never_fetch_logs(self)
    self._terminated = False
    self._previous_handler = None

  def _implements_train_batch_hooks(self):
    return True  # Under PSS too: Keras skips batch hooks for epoch-only backups.

  def on_train_begin(self, logs=None):
    self._pss = isinstance(self.model.distribute_strategy, tf.distribute.ParameterServerStrategy)
    # Keras counts no batches under PSS, so only epoch-level resume works there.
    self.save_freq = "epoch" if self._pss else _NEVER
    folders.makedirs(self.backup_dir)  # Its user's only: a backup is restored as found.
    super().on_train_begin(logs)
    epoch, batch = tf_keras_internals.saved_position(self)
    if epoch >= 0:
      logger.info("BackupAndRestore: resuming after epoch %d, batch %d (from %s)",
                  epoch + 1, batch + 1, self.backup_dir)
      _restore_replicas(self.model, self.backup_dir)
    if not self._pss:  # Under parameter servers steps are at-least-once anyway.
      dataset = tf_keras_internals.enable_input_replay(replay.read_past)
      if dataset is not None:
        replay.warn_if_not_replayable(dataset)
    self._start_checks()

  def _fit_code(self):
    return _tf_keras_fit_code()

  def _write_probe(self, directory: str) -> None:
    tf.train.Checkpoint(model=self.model).write(os.path.join(directory, "probe"))

  def on_train_batch_begin(self, batch, logs=None):
    if not self._pss:
      super().on_train_batch_begin(batch, logs)

  def on_train_batch_end(self, batch, logs=None):
    if self._pss:
      if self._backup_seconds is None:
        self._measure_backup()
      # No collective to agree through and nothing to count: check every step.
      if self._terminated:
        self._exit_after_backup(f"batch {batch + 1}")
      return
    super().on_train_batch_end(batch, logs)
    if self._check_due(batch):
      self._check(batch)

  def on_epoch_begin(self, epoch, logs=None):
    super().on_epoch_begin(epoch, logs)
    self._reset_checks()

  def on_epoch_end(self, epoch, logs=None):
    self._back_up(epoch)
    if self._pss:
      if self._terminated:
        self._exit_after_backup("its last batch", backed_up=True)
      return
    self._check(None)

  def on_train_end(self, logs=None):
    self._restore_handler()
    tf_keras_internals.disable_input_replay()
    super().on_train_end(logs)
    tf_keras_internals.leave_ready_for_another_fit(self.model)
    if local_sgd.of(self.model) is not None:  # Keras deletes its own backup only.
      local_sgd.of(self.model).remove_replicas(self.backup_dir)

  def _back_up(self, epoch: int, batch: Optional[int] = None) -> None:
    _save_replicas(self.model, self.backup_dir)  # Before the backup: see LocalSGD.save_replicas.
    tf_keras_internals.back_up(self, epoch, batch)

  def _exit_after_backup(self, where: str, *, batch: Optional[int] = None,
                         backed_up: bool = False) -> None:
    epoch = tf_keras_internals.current_epoch(self)
    if self._pss:
      # Resume re-runs this epoch from its start: record the one before as done.
      if not backed_up:
        tf.distribute.experimental.coordinator.ClusterCoordinator(
            self.model.distribute_strategy).join()  # Steps in flight land first.
        tf_keras_internals.set_saved_epoch(self, epoch - 1)
        tf_keras_internals.back_up(self, epoch - 1)
    elif not backed_up:
      self._back_up(epoch, batch)
    self._restore_handler()
    logger.info("BackupAndRestore: SIGTERM: backed up epoch %d after %s to %s; exiting with "
                "code %d. Run the same job again to resume.", epoch + 1, where, self.backup_dir,
                PREEMPTED_EXIT_CODE)
    raise SystemExit(PREEMPTED_EXIT_CODE)


@functools.lru_cache(maxsize=None)
def _tf_keras_fit_code():
  return inspect.unwrap(keras_support.require_tf_keras().Model.fit).__code__


# Local SGD: a backup holds one replica's copy of each variable; every task keeps its
# replicas' own weights and optimizer state beside it (tfdist.training.local_sgd).

def _save_replicas(model, backup_dir: str) -> None:
  if local_sgd.of(model) is not None:
    local_sgd.of(model).save_replicas(backup_dir)


def _restore_replicas(model, backup_dir: str) -> None:
  if local_sgd.of(model) is not None:
    local_sgd.of(model).restore_replicas(backup_dir)


def _inside(frame, code) -> bool:
  """Whether `code` (a Keras `fit`) is on the stack of the interrupted frame."""
  while frame is not None:
    if frame.f_code is code:
      return True
    frame = frame.f_back
  return False


def backup_and_restore(checkpoint_dir: str, *, check_every: Optional[int] = None,
                       check_seconds: float = 1.0, model=None):
  """`BackupAndRestore` in `checkpoint_dir/backup`, for `model`'s Keras.

  After an interruption, the same `fit` call resumes from the last finished
  epoch, or from the batch where SIGTERM stopped it, and its input reads on
  from there in the interrupted run's order (see `BackupAndRestore`). The
  backup is deleted when training finishes. For a Keras 3 `model`, Keras 3's own callback, written by
  the chief only (`keras3_backup_and_restore`): at epoch ends, and on SIGTERM.
  """
  if (model is not None and keras_support.is_keras3_model(model)) or \
      not keras_support.tf_keras_installed():  # Keras 3 alone: every model is Keras 3's.
    return keras3_backup_and_restore(os.path.join(checkpoint_dir, BACKUP_SUBDIR),
                                     check_every=check_every, check_seconds=check_seconds)
  return BackupAndRestore(os.path.join(checkpoint_dir, BACKUP_SUBDIR), check_every=check_every,
                          check_seconds=check_seconds)


def keras3_backup_and_restore(backup_dir: str, *, check_every: Optional[int] = None,
                              check_seconds: float = 1.0):
  """Keras 3's `BackupAndRestore`, with the backup written once, by the chief.

  Keras 3's callback writes from every worker into the same folder, and under
  MultiWorkerMirroredStrategy the second writer fails on the HDF5 file's lock.
  Here every worker still saves (saving may read values across workers), but
  the others into a temporary folder that is removed at once, TF's rule for
  multi-worker files; every worker restores from the chief's folder. On
  SIGTERM it backs up at the next check, on every worker at the same step, and
  exits with `PREEMPTED_EXIT_CODE`, as `BackupAndRestore` does for tf_keras.
  Keras 3's own callback resumes at epoch starts only; this one records the
  batch too, and a restart reads on after it in the interrupted run's order,
  as `BackupAndRestore` does.
  """
  return _keras3_backup_class()(backup_dir, check_every=check_every,
                                check_seconds=check_seconds)


@functools.lru_cache(maxsize=None)
def _keras3_backup_class():
  import keras  # Only for Keras 3 models: importing tfdist must not load it.

  fit_code = inspect.unwrap(keras.Model.fit).__code__

  class Keras3BackupAndRestore(_SigtermChecks, keras.callbacks.BackupAndRestore):
    __doc__ = keras3_backup_and_restore.__doc__
    # Writes once and resumes exactly itself: what `tfdist launch` adds to Keras's own skips it.
    _tfdist_own = True

    def __init__(self, backup_dir: str, *, check_every: Optional[int] = None,
                 check_seconds: float = 1.0):
      super().__init__(backup_dir)  # Keras 3 backs up at epoch ends; tfdist on SIGTERM too.
      preemption.check_arguments(check_every, check_seconds)
      self.check_every = check_every
      self.check_seconds = float(check_seconds)
      self._previous_handler = None

    def _fit_code(self):
      return fit_code

    def _write_probe(self, directory):
      self.model.save_weights(os.path.join(directory, "probe.weights.h5"))

    def on_train_begin(self, logs=None):
      folders.makedirs(self.backup_dir)  # Its user's only: a backup is restored as found.
      super().on_train_begin(logs)
      start = keras_internals.initial_epoch(self.model)  # Keras 3 sets it on restore.
      batch = keras_internals.saved_batch(self)
      if start > 0 or batch >= 0:  # A backup was restored.
        _restore_replicas(self.model, self.backup_dir)
      replay.read_on_keras3_fit(self, start, batch)
      self._start_checks()

    def on_epoch_begin(self, epoch, logs=None):
      super().on_epoch_begin(epoch, logs)
      self._running_epoch = epoch  # What a mid-epoch backup records.
      self._reset_checks()

    def on_train_batch_end(self, batch, logs=None):
      super().on_train_batch_end(batch, logs)
      if self._check_due(batch):
        self._check(batch)

    def on_epoch_end(self, epoch, logs=None):
      self._running_epoch = epoch + 1
      keras_internals.save_backup(self, epoch + 1)  # The epoch's backup: a restart begins the next.
      self._check(None)

    def _exit_after_backup(self, where, *, batch=None, backed_up=False):
      # The epoch a restart begins with (0-based), and the batch it reads on after.
      resume = self._running_epoch
      if not backed_up:
        keras_internals.save_backup(self, resume, batch)
      self._restore_handler()
      keras_internals.disable_input_replay()
      # At an epoch's end on_epoch_end has moved `resume` on to the next epoch.
      running = resume if backed_up else resume + 1
      logger.info("BackupAndRestore: SIGTERM: backed up epoch %d after %s to %s; exiting with "
                  "code %d. Run the same job again to resume there.",
                  running, where, self.backup_dir, PREEMPTED_EXIT_CODE)
      raise SystemExit(PREEMPTED_EXIT_CODE)

    def _save_model(self):  # Keras 3's own hook: the one place it writes a backup.
      _save_replicas(self.model, self.backup_dir)  # Before it: see LocalSGD.save_replicas.
      # Made by the helper: Keras's own check-then-create races with the other
      # workers' folders inside it.
      with tf_internals.chief_dir(self.backup_dir, self.model.distribute_strategy) as write_dir:
        with keras_internals.backup_written_to(self, write_dir):
          super()._save_model()

    def on_train_end(self, logs=None):
      self._restore_handler()
      keras_internals.disable_input_replay()
      strategy = self.model.distribute_strategy
      # A barrier (one tiny all-reduce): every worker's last save, whose temporary
      # folder is inside the backup, is done before the chief deletes it all.
      if tf_internals.is_multi_worker_mirrored(strategy):  # One process: nothing to wait for.
        barrier.barrier(strategy)
      if is_chief(strategy):  # One deleter, not a race.
        super().on_train_end(logs)

  return Keras3BackupAndRestore
