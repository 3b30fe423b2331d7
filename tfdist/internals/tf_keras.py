"""tf_keras's private code that tfdist uses, in one place.

Run with tf_keras 2.17 and the 2.22 nightly, the oldest and newest supported (`TESTED`). These read
or call tf_keras code; one, `enable_input_replay`, replaces a method of one
running `fit`'s data handler, undone by `disable_input_replay` (`PATCHES`).
docs/known_issues.md tells why.
"""

import weakref
from typing import Any, Callable, Optional, Tuple

from tfdist.internals import frames
from tfdist.internals import versions

TESTED = ((2, 17), (2, 22))


def version() -> Optional[versions.Version]:
  import tf_keras
  return versions.parse(tf_keras.__version__)


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


def leave_ready_for_another_fit(model) -> None:
  """Puts back the `_training_state` of None that tf_keras's BackupAndRestore deletes at its end.

  Every tf_keras `fit` reads it (`Model._maybe_load_initial_counters_from_ckpt`), so
  without it the model's next `fit` without a BackupAndRestore raised AttributeError
  (docs/known_issues.md). `Model.__init__` sets the same None.
  """
  model._training_state = None


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


# --- Exact resume of `fit`'s input. tf_keras resumes a backup at its epoch and
# batch, but reads that epoch from a new iterator: the first epoch's shuffle
# order, from its first batch (TF cannot checkpoint a distributed iterator,
# tensorflow/tensorflow#56372). For the running `fit` only, its DataHandler
# first makes the iterators the interrupted run had made (each draws the next
# epoch's order from the dataset's seed) and reads past the batches trained on.

PATCHES = {"input_replay": "tensorflow/tensorflow#56372"}
GATES = {"input_replay": versions.Gate(
    "exact resume of fit's input", "tf_keras", TESTED, PATCHES["input_replay"],
    "a resumed tf_keras `fit` reads the interrupted epoch again from its start, in the first "
    "epoch's order")}
_replaying = weakref.WeakSet()  # The DataHandlers whose enumerate_epochs is replaced.


def enable_input_replay(skip: Callable[[Any, int], Any]) -> Optional[Any]:
  """Makes the running `fit` resume its input exactly; from a callback's `on_train_begin`.

  Args:
    skip: `skip(iterator, n)` reads and drops `n` batches of `iterator`.

  Returns:
    The user's dataset (what to check for replayability), or None if nothing
    was replaced (an untested tf_keras, or no DataHandler, as under
    ParameterServerStrategy's DatasetCreator).
  """
  if not GATES["input_replay"].check(version()):
    return None
  import tf_keras
  handler = frames.running_local(tf_keras.Model.fit, "data_handler")
  if handler is None or not hasattr(handler, "_initial_step"):
    return None
  original = handler.enumerate_epochs

  def enumerate_epochs():
    # Set by fit from the backup after on_train_begin, before this runs.
    epoch, step = handler._initial_epoch, handler._initial_step
    batches = step
    if handler._adapter.should_recreate_iterator():
      for _ in range(epoch):  # One iterator per epoch was made before this one.
        iter(handler._dataset)
    elif handler._inferred_steps is not None:
      batches += epoch * handler._inferred_steps  # One iterator for the whole fit.
    for index, (number, iterator) in enumerate(original()):
      if index == 0 and batches:
        skip(iterator, batches)
      yield number, iterator

  handler.enumerate_epochs = enumerate_epochs
  _replaying.add(handler)
  return getattr(handler._adapter, "_dataset", None)


def disable_input_replay() -> None:
  """Puts the DataHandlers' own `enumerate_epochs` back."""
  for handler in list(_replaying):
    vars(handler).pop("enumerate_epochs", None)
  _replaying.clear()
