"""Every MultiWorkerMirroredStrategy scope of a launched task compares its variables first.

`enable_checked_scope(make)` wraps `tf.distribute.MultiWorkerMirroredStrategy.scope`
(a public method) so that `with strategy.scope():` also enters `make(strategy)`,
for a strategy over two or more tasks; `disable_checked_scope()` puts it back.
`tfdist.strategies._fingerprint` gives the context: a variable creator that
compares each variable across workers before TensorFlow broadcasts it, whose
own error names neither variable nor task (tensorflow/tensorflow#47203).
Gated on the TensorFlow versions tested (`tensorflow.TESTED`).
"""

import contextlib
import functools
from typing import Callable

from tfdist.internals import tensorflow as tf_internals
from tfdist.internals import versions

PATCHES = {"checked_scope": "tensorflow/tensorflow#47203"}
GATES = {"checked_scope": versions.Gate(
    "variable check across workers", "TensorFlow", tf_internals.TESTED, PATCHES["checked_scope"],
    "workers that build different models are not compared: they fail in TensorFlow's "
    "collectives with words naming neither the variable nor the task")}
_originals = {}  # class -> its scope


def enable_checked_scope(make: Callable[[object], object]) -> bool:
  """Makes every multi-worker MultiWorkerMirroredStrategy scope enter `make(strategy)` too."""
  import tensorflow as tf
  cls = tf.distribute.MultiWorkerMirroredStrategy
  if cls in _originals:
    return True
  if not GATES["checked_scope"].check(tf_internals.version()):
    return False
  original = cls.scope

  @functools.wraps(original)
  def scope(self):
    if not tf_internals.is_multi_worker_mirrored(self):
      return original(self)
    return _both(original(self), make(self))

  _originals[cls] = original
  cls.scope = scope
  return True


def disable_checked_scope() -> None:
  """Puts MultiWorkerMirroredStrategy's own `scope` back."""
  for cls, original in _originals.items():
    cls.scope = original
  _originals.clear()


def is_restore_on_create(initial_value) -> bool:
  """Whether a variable's initial value restores it from a checkpoint (left as it is)."""
  return type(initial_value).__name__ == "CheckpointInitialValueCallable"


@contextlib.contextmanager
def _both(first, second):
  """Enters the strategy's own scope, then `make`'s; `as` gives what the first gives."""
  with first as entered, second:
    yield entered
