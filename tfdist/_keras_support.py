"""Which Keras a process uses, and where raw Keras 3 fails under tf.distribute.

On TF 2.21, raw Keras 3 cannot `fit` under multi-worker MultiWorkerMirroredStrategy
(keras-team/keras#20585) nor under ParameterServerStrategy (keras-team/keras#18624:
Keras 3 has no DatasetCreator). tf_keras trains under all of them. tfdist's
multi_worker_mirrored makes Keras 3 train there too (`tfdist.internals.keras`); under
parameter_server, Keras 3 trains with `tfdist.training.loop`, and its `fit` is refused
before the first step (see `refuse_keras3`) instead of failing inside it.

`tfdist.keras` is tf_keras. Importing tfdist changes no environment variable:
`use_legacy_keras()` is the explicit call that makes `tf.keras` resolve to it.
"""

import os
import sys
import warnings
from typing import Callable, Optional

from tfdist import _choices as choices
from tfdist import _stack
from tfdist.internals import tensorflow as tf_internals

LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
KERAS3 = "keras3"
TF_KERAS = "tf_keras"

# Measured on TF 2.21 / Keras 3.15 / tf_keras 2.21 (docs/known_issues.md) and asserted
# by tests/internals/test_keras.py and tests/test_keras_support.py.
MWMS_FAILURE = ("Keras 3 cannot fit under multi-worker MultiWorkerMirroredStrategy: "
                "it fails converting PerReplica values (keras-team/keras#20585)")
PSS_FAILURE = ("Keras 3 cannot fit under ParameterServerStrategy: it has no "
               "DatasetCreator and never uses the ClusterCoordinator (keras-team/keras#18624)")
# Where each Keras 3 support of the strategy traits leaves raw Keras 3's fit, what tfdist
# makes of it, and the patch of tfdist.internals.keras that rests on.
_RAW_FAILURE = {choices.KERAS3_FAILS_MULTI_WORKER: MWMS_FAILURE, choices.KERAS3_NO_FIT: PSS_FAILURE}
_UNDER_TFDIST = {
    choices.KERAS3_FAILS_MULTI_WORKER: "works (tfdist.internals.keras)",
    choices.KERAS3_NO_FIT: ("fit refused before the first step, pointing to "
                            "tfdist.training.loop, which works (`tfdist train` uses it)")}
_PATCH = {choices.KERAS3_FAILS_MULTI_WORKER: "multi_worker",
          choices.KERAS3_NO_FIT: "atomic_assign_add"}


def _cells():
  """(traits, label, workers, ps tasks) of each cell of the Keras x strategy matrix.

  A collective strategy has two: one worker, where raw Keras 3 fits, and two.
  """
  for traits in choices.STRATEGIES:
    if traits.kind == choices.COLLECTIVE:
      yield traits, f"{traits.name} (1 worker)", 1, 0
      yield traits, f"{traits.name} (2+ workers)", 2, 0
    elif traits.kind == choices.PARAMETER_SERVER:
      yield traits, traits.name, 2, 1
    elif traits.kind == choices.SINGLE_MACHINE:
      yield traits, traits.name, 0, 0


# (strategy, label, workers, ps tasks) of each cell, from the strategies' traits.
CELLS = tuple((traits.name, label, workers, ps) for traits, label, workers, ps in _cells())


def _support():
  """SUPPORT and RESTS_ON_PATCH, from each strategy's `keras3_fit` trait."""
  support, patches = {}, {}
  for flavour in (KERAS3, TF_KERAS):
    for traits, label, workers, _ in _cells():
      fit = traits.keras3_fit if flavour == KERAS3 else choices.KERAS3_FITS
      if fit == choices.KERAS3_FITS or (fit == choices.KERAS3_FAILS_MULTI_WORKER
                                        and workers < 2):
        support[(flavour, label)] = ("works", "works")
        continue
      support[(flavour, label)] = (f"FAILS: {_RAW_FAILURE[fit]}", _UNDER_TFDIST[fit])
      patches[(flavour, label)] = _PATCH[fit]
  return support, patches


# (keras flavour, cell label) -> (what raw Keras `fit` does, what it does under tfdist),
# and the cells whose "works" under tfdist rests on a patch of tfdist.internals.keras.
SUPPORT, RESTS_ON_PATCH = _support()


def use_legacy_keras() -> None:
  """Makes `tf.keras` resolve to tf_keras in this process and its children.

  TensorFlow resolves `tf.keras` lazily, on first attribute access, from
  `TF_USE_LEGACY_KERAS`. So setting it works even after `import tensorflow`, as
  long as nothing touched `tf.keras` yet; if something did, this warns. An
  explicit user setting of the variable wins. Only needed for code written
  against `tf.keras`: `tfdist.keras` is tf_keras either way.
  """
  os.environ.setdefault(LEGACY_KERAS_ENV, "1")
  flavour = tf_keras_flavour()
  if flavour == KERAS3:
    warnings.warn(
        "tf.keras in this process is already Keras 3, because it was used before "
        "tfdist.use_legacy_keras() was called. Call it before anything uses "
        "tf.keras, or build models with `from tfdist import keras` (tf_keras), or "
        f"set {LEGACY_KERAS_ENV}=1 in the environment. Received: tf.keras is Keras 3",
        UserWarning, stacklevel=2)


def select(flavour: str) -> None:
  """Makes `tf.keras` resolve to `flavour` in this process and its children.

  Unlike `use_legacy_keras`, it overrides the variable: for a program whose
  own setting chose the Keras (`tfdist train --keras`), so that `tf.keras` in a
  user's module means the Keras the job trains with.

  Raises:
    ValueError: `flavour` is neither tf_keras nor keras3.
  """
  if flavour not in (TF_KERAS, KERAS3):
    raise ValueError(f"`flavour` must be {TF_KERAS!r} or {KERAS3!r}. Received: {flavour!r}")
  os.environ[LEGACY_KERAS_ENV] = "1" if flavour == TF_KERAS else "0"
  resolved = tf_keras_flavour()
  if resolved not in (None, flavour):
    warnings.warn(
        f"tf.keras in this process is already {resolved}, because it was used before "
        f"the Keras was selected; tf.keras stays {resolved} here (child processes get "
        f"{flavour}). Select it before anything uses tf.keras. Received: {flavour}",
        UserWarning, stacklevel=2)


def tf_keras_flavour() -> Optional[str]:
  """What `tf.keras` resolved to in this process: KERAS3, TF_KERAS, or None if unresolved."""
  tf = sys.modules.get("tensorflow")
  if tf is None:
    return None
  keras = tf.__dict__.get("keras")
  if keras is None:
    return None
  resolved, name = tf_internals.lazy_keras_name(keras)
  if not resolved:
    return None
  if name.startswith("keras."):
    return KERAS3
  if name.startswith("tf_keras"):
    return TF_KERAS
  return None


def keras_module(flavour: str):
  """The package of `flavour`: `keras` for KERAS3, `tf_keras` for TF_KERAS.

  Raises:
    ValueError: `flavour` is neither.
    ModuleNotFoundError: tf_keras is not installed, with what to install.
  """
  if flavour not in (KERAS3, TF_KERAS):
    raise ValueError(f"The Keras must be {KERAS3!r} or {TF_KERAS!r}. Received: {flavour!r}")
  if flavour == TF_KERAS:
    return require_tf_keras()
  import keras  # pylint: disable=import-outside-toplevel  Importing tfdist must not load Keras.
  return keras


# Keras 3 alone: TensorFlow 2.16 and later install Keras 3 but not tf_keras, so an image's
# TensorFlow often comes without it (docs/get-started/install.md). tfdist then trains with
# Keras 3; what only tf_keras has says what to install when it is used, not when imported.

def default_keras() -> str:
  """TF_KERAS where tf_keras is installed here, else KERAS3: what `tf.keras` is without a choice."""
  return TF_KERAS if tf_keras_installed() else KERAS3


def tf_keras_installed() -> bool:
  """Whether tf_keras can be imported here (without importing it)."""
  loaded = sys.modules.get("tf_keras", False)
  if loaded is not False:
    return loaded is not None  # None: its import is blocked, as Python documents.
  import importlib.util  # pylint: disable=import-outside-toplevel
  return importlib.util.find_spec("tf_keras") is not None


def optional_tf_keras():
  """tf_keras, or None where it is not installed (Keras 3 alone)."""
  try:
    import tf_keras  # pylint: disable=import-outside-toplevel
  except ModuleNotFoundError as e:
    if e.name != "tf_keras":
      raise  # tf_keras is there, and something it imports is not: not ours to hide.
    return None
  return tf_keras


class TfKerasNotInstalled(ModuleNotFoundError):
  """tf_keras is needed here and not installed; the message says what to install."""


def tf_keras_missing(what: str = "", keras3_instead: bool = False) -> TfKerasNotInstalled:
  """The error for using `what` (tf_keras-only) where tf_keras is not installed, with the fix.

  `keras3_instead`: `what` chose tf_keras, and Keras 3 is the other way (always for
  `tfdist.keras`, an empty `what`).
  """
  return TfKerasNotInstalled(_stack.missing(TF_KERAS, what, keras3_instead or not what),
                             name=TF_KERAS)


def require_tf_keras(what: str = ""):
  """tf_keras; where it is not installed, `tf_keras_missing(what)` is raised."""
  tf_keras = optional_tf_keras()
  if tf_keras is None:
    raise tf_keras_missing(what)
  return tf_keras


def callback_base():
  """The Keras `Callback` class that tfdist's callbacks for both Kerases derive from.

  tf_keras's where it is installed: both Kerases' `fit` take it. Keras 3's
  otherwise, where only Keras 3 models can be fit.
  """
  tf_keras = optional_tf_keras()
  if tf_keras is not None:
    return tf_keras.callbacks.Callback
  import keras  # pylint: disable=import-outside-toplevel
  return keras.callbacks.Callback


def tf_keras_base(name: str, what: str):
  """The tf_keras class `name` ("callbacks.BackupAndRestore"), to derive a tf_keras-only class from.

  Where tf_keras is not installed, a stand-in: making an instance of the class
  derived from it raises `tf_keras_missing(what)`, and importing its module still works.
  """
  tf_keras = optional_tf_keras()
  if tf_keras is None:
    return type(f"NeedsTfKeras_{name.rsplit('.', 1)[-1]}", (_NeedsTfKeras,), {"_what": what})
  value = tf_keras
  for part in name.split("."):
    value = getattr(value, part)
  return value


class _NeedsTfKeras:
  """Stands in for a tf_keras base class where tf_keras is not installed."""

  _what = ""

  def __init__(self, *args, **kwargs):
    del args, kwargs
    raise tf_keras_missing(self._what)

  @classmethod
  def from_config(cls, *args, **kwargs):  # Keras builds a saved layer or model from its class.
    del args, kwargs
    raise tf_keras_missing(cls._what)


def model_flavour(model) -> str:
  """KERAS3 or TF_KERAS: the Keras that built `model`."""
  return KERAS3 if is_keras3_model(model) else TF_KERAS


def is_keras3_model(model) -> bool:
  """Whether `model` is a Keras 3 model (else tf_keras, or not a model)."""
  return any(cls.__module__.startswith("keras.") for cls in type(model).__mro__)


def has_keras_train_step(model) -> bool:
  """Whether `model`'s class steps with Keras's own `train_step` (either Keras's), not its own."""
  for cls in type(model).__mro__:
    if "train_step" in vars(cls):
      return cls.__module__.startswith(("keras.", "tf_keras."))
  return False


def is_keras3_function(fn: Callable) -> bool:
  """Whether `fn` (a step function, possibly a tf.function) belongs to Keras 3."""
  fn = getattr(fn, "python_function", fn)
  return getattr(fn, "__module__", "").startswith("keras.")


# Where Keras 3 has no `fit` at all: its own loop is the other way to train it.
_NO_FIT = tuple(s.name for s in choices.STRATEGIES if s.keras3_fit == choices.KERAS3_NO_FIT)


def refuse_keras3(strategy_name: str, reason: str) -> None:
  """Raises the error a Keras 3 `fit` under an unsupported strategy gets, up front."""
  import keras  # Only reached from inside Keras 3's own trainer.
  loop = ("Train this Keras 3 model with `tfdist.training.loop.Loop(strategy, model, loss=..., "
          "optimizer=...).fit(dataset_fn, epochs=..., steps_per_epoch=...)`, or build it "
          if strategy_name in _NO_FIT else "Build the model ")
  raise TypeError(
      f"{reason}. {loop}with tf_keras, which trains under "
      f"{strategy_name}: `from tfdist import keras` (or call "
      "tfdist.use_legacy_keras() first and use tf.keras). "
      f"Received: a Keras {keras.__version__} model under {strategy_name}")


# Whether a strategy is MultiWorkerMirroredStrategy over 2 or more workers.
is_multi_worker_mirrored = tf_internals.is_multi_worker_mirrored


def set_distribute_reduction_method(model, strategy) -> str:
  """Reports a multi-worker step's metrics without one more all-reduce per step.

  tf_keras computes the compiled metrics inside each step with their
  sync-on-read variables all-reduced across workers, so every worker already
  holds the global values. It then reduces the step's outputs with "sum",
  another collective per step: on 2 localhost workers here the default job's
  CNN (batch 1024) stepped in 17.9 ms with it and 16.7 ms without. "first"
  takes the local copy of the same global values. Applied only under multi-worker
  MultiWorkerMirroredStrategy, to a model that uses Keras's own `train_step`
  and whose method is still "auto": a custom step may return unreduced values.

  Returns:
    The model's `distribute_reduction_method` afterwards.
  """
  import tf_keras  # Not at the top: importing tfdist must not load TF or Keras.
  own_step = type(model).train_step is tf_keras.Model.train_step
  if is_multi_worker_mirrored(strategy) and own_step \
      and model.distribute_reduction_method == "auto":
    model.distribute_reduction_method = "first"
  return model.distribute_reduction_method
