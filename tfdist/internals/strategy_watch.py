"""Seeing which strategy a task builds, and which one its Keras `fit` runs under.

A task of a multi-worker TF_CONFIG that builds MirroredStrategy (which reads
no TF_CONFIG) or fits with no strategy trains alone, and nothing in
TensorFlow says so (tensorflow/tensorflow#39753: "just running python demo.py
is one worker training, not multi worker"). `tfdist.task._trains_alone`
names it; these two watches tell it what to look at:

- `enable_strategy_watch(callback)`: `callback(strategy)` whenever a
  `tf.distribute.Strategy` is built (wraps the base class's constructor,
  which every TF2 strategy calls);
- `enable_fit_watch(model_class, callback)`: `callback(model)` when
  `model_class.fit` starts (`keras.Model` or `tf_keras.Model`).

Both wrap public functions of public classes, gated on the versions tested
(`TESTED`, TensorFlow's), with their undo `disable_*`. A callback that raises
stops the constructor or `fit` (that is how an error mode stops a task).
"""

import functools
import sys
from typing import Callable

from tfdist.internals import versions

TESTED = ((2, 17), (2, 22))
PATCHES = {"strategy_watch": "tensorflow/tensorflow#39753",
           "fit_watch": "tensorflow/tensorflow#39753"}
GATES = {
    "strategy_watch": versions.Gate(
        "strategy watch", "TensorFlow", TESTED, PATCHES["strategy_watch"],
        "`tfdist launch` cannot tell a task that builds no multi-worker strategy (it trains "
        "alone), and says nothing of it"),
    "fit_watch": versions.Gate(
        "fit watch", "TensorFlow", TESTED, PATCHES["fit_watch"],
        "`tfdist launch` cannot tell a task whose fit runs under no multi-worker strategy"),
}

# The modules that define Keras 3's and tf_keras's `Model`, for a watch that waits for their import.
MODEL_MODULES = ("keras.src.models.model", "tf_keras.src.engine.training")

_strategy_originals = {}  # tf.distribute.Strategy -> its own __init__.
_fit_originals = {}  # model class -> its own `fit` in its __dict__, or None (inherited).


def _may_patch(patch: str) -> bool:
  tf = sys.modules.get("tensorflow")
  installed = versions.parse(tf.__version__) if tf is not None else None
  return GATES[patch].check(installed)


def enable_strategy_watch(callback: Callable[[object], None]) -> bool:
  """Calls `callback(strategy)` once each `tf.distribute.Strategy` is built. Idempotent.

  Example:

      enable_strategy_watch(lambda strategy: print(type(strategy).__name__))
  """
  if _strategy_originals:
    return True
  if not _may_patch("strategy_watch"):
    return False
  import tensorflow as tf
  cls = tf.distribute.Strategy
  original = cls.__init__

  @functools.wraps(original)
  def __init__(self, *args, **kwargs):
    original(self, *args, **kwargs)
    callback(self)

  _strategy_originals[cls] = original
  cls.__init__ = __init__
  return True


def disable_strategy_watch() -> None:
  for cls, original in _strategy_originals.items():
    cls.__init__ = original
  _strategy_originals.clear()


def enable_fit_watch(model_class, callback: Callable[[object], None]) -> bool:
  """Calls `callback(model)` when `model_class.fit` starts (its subclasses' too). Idempotent.

  Example:

      enable_fit_watch(keras.Model, lambda model: print(model.distribute_strategy))
  """
  if model_class in _fit_originals:
    return True
  if not _may_patch("fit_watch"):
    return False
  inherited = model_class.fit

  @functools.wraps(inherited)
  def fit(self, *args, **kwargs):
    callback(self)
    return inherited(self, *args, **kwargs)

  _fit_originals[model_class] = vars(model_class).get("fit")
  model_class.fit = fit
  return True


def disable_fit_watch() -> None:
  for model_class, original in _fit_originals.items():
    if original is None:
      del model_class.fit
    else:
      model_class.fit = original
  _fit_originals.clear()
