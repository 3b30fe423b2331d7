"""tf_keras's private code that tfdist uses, in one place.

Tested with tf_keras 2.21 (`TESTED`); setup.cfg pins that series. Nothing here
replaces tf_keras code: these read or call it. docs/known_issues.md tells why.
"""

from typing import Optional, Tuple

from tfdist.internals import versions

TESTED = ((2, 21), (2, 21))


def version() -> Optional[versions.Version]:
  import tf_keras
  return versions.parse(tf_keras.__version__)


# --- TF's chief-writes rule, as tf_keras's ModelCheckpoint and BackupAndRestore
# use it: the chief writes to the real path, every other worker to a temporary
# one removed right after (tensorflow/tensorflow#31070 shows the race it avoids).

def write_filepath(path: str, strategy) -> str:
  from tf_keras.src.distribute import distributed_file_utils
  return distributed_file_utils.write_filepath(path, strategy)


def remove_temp_dir_with_filepath(path: str, strategy) -> None:
  from tf_keras.src.distribute import distributed_file_utils
  distributed_file_utils.remove_temp_dir_with_filepath(path, strategy)


def write_dirpath(path: str, strategy) -> str:
  from tf_keras.src.distribute import distributed_file_utils
  return distributed_file_utils.write_dirpath(path, strategy)


def remove_temp_dirpath(path: str, strategy) -> None:
  from tf_keras.src.distribute import distributed_file_utils
  distributed_file_utils.remove_temp_dirpath(path, strategy)


def is_random_layer(layer) -> bool:
  """Whether a tf_keras layer draws random numbers (Dropout, RandomFlip, ...)."""
  from tf_keras.src.engine import base_layer  # The one base class they share.
  return isinstance(layer, base_layer.BaseRandomLayer)


# --- BackupAndRestore's state, which its subclass in tfdist.training.checkpoints
# reads and sets: tf_keras keeps it in private attributes.

def add_supported_strategies(callback, *strategy_types) -> None:
  """Lets `callback` run under strategies it does not list (they checkpoint the same)."""
  callback._supported_strategies += tuple(strategy_types)


def saved_position(callback) -> Tuple[int, int]:
  """(epoch, batch) its backup was saved at, -1 for none; after `on_train_begin`."""
  state = callback._training_state
  return int(state._ckpt_saved_epoch.numpy()), int(state._ckpt_saved_batch.numpy())


def set_saved_epoch(callback, epoch: int) -> None:
  """The epoch the next backup records: Keras saves its counter's variable, not the argument."""
  callback._training_state._ckpt_saved_epoch.assign(epoch)


def current_epoch(callback) -> int:
  return callback._current_epoch


def back_up(callback, epoch: int, batch: Optional[int] = None) -> None:
  """A backup now, recording `epoch` and `batch` (None: the epoch's end)."""
  if batch is None:
    callback._backup(epoch=epoch)
  else:
    callback._backup(epoch=epoch, batch=batch)


def never_fetch_logs(callback) -> None:
  """Marks `callback` as one whose hooks take the logs as they are: Keras fetches none for it.

  Under ParameterServerStrategy the logs are remote values, and fetching them
  would wait for every step.
  """
  callback._supports_tf_logs = True
