"""Every Keras `fit` of a launched task gets tfdist's callbacks, in scripts that never import tfdist.

The launcher's stall watchdog needs each task's training steps, and an
unmodified script passes no tfdist callback. `enable_fit_callbacks(make)`
wraps `Model.fit` of both Kerases (tf_keras's `tf_keras.Model.fit`, Keras 3's
`keras.Model.fit`: public names, no private code) so that every call gets
`make(callback_base_class)` appended to its callbacks, and its input passed
through `input_of(x, strategy)` when given (the step report's input stamp;
`strategy` is the model's public `distribute_strategy`, None if it has none);
`disable_fit_callbacks` puts `fit` back. `tfdist launch`'s task site enables
it once either Keras is imported (`tfdist.task._imports.after_import`
for each of KERAS_MODULES). Gated on the Keras versions tested; PATCHES names
the public issue: a distributed job that stops moving says nothing
(tensorflow/tensorflow#35878).
"""

import functools
import logging
import sys
from typing import Callable, List, Optional

from tfdist.internals import keras as keras_internals
from tfdist.internals import tf_keras as tf_keras_internals
from tfdist.internals import versions

logger = logging.getLogger("tfdist")

PATCHES = {"fit_callbacks": "tensorflow/tensorflow#35878"}
# tf_keras's; Keras 3's `fit` is wrapped where its multi-worker workaround applies.
GATES = {"fit_callbacks": versions.Gate(
    "fit callbacks", "tf_keras", tf_keras_internals.TESTED, PATCHES["fit_callbacks"],
    "a launched task's tf_keras `fit` reports no steps: no stall watchdog, no status lines")}
MakeCallbacks = Callable[[type], List[object]]
# The packages whose `Model.fit` gets the callbacks.
KERAS_MODULES = ("tf_keras", "keras")
_CALLBACKS_POSITION = 5
_originals = {}  # Model class -> its own fit


def _tested(module_name: str) -> bool:
  if module_name == "tf_keras":
    return GATES["fit_callbacks"].check(tf_keras_internals.version())
  return keras_internals.unsupported_reason(keras_internals.keras_version(),
                                            "multi_worker") is None


def _patch(module, make: MakeCallbacks, input_of: Optional[Callable]) -> None:
  model_class = module.Model
  if model_class in _originals or not _tested(module.__name__):
    return
  original = model_class.fit
  base = module.callbacks.Callback
  legacy = module.__name__ == "tf_keras"

  @functools.wraps(original)
  def fit(self, *args, **kwargs):
    # `callbacks` is fit's sixth parameter (x, y, batch_size, epochs, verbose, callbacks).
    positional = len(args) > _CALLBACKS_POSITION
    callbacks = args[_CALLBACKS_POSITION] if positional else kwargs.get("callbacks")
    if callbacks is None or isinstance(callbacks, (list, tuple)):
      added = make(base)
      for callback in added:
        # tf_keras would fetch the logs at every batch for them: they get them as tensors,
        # which the status line converts only when it writes one (tfdist.task.progress).
        if legacy:
          tf_keras_internals.never_fetch_logs(callback)
      callbacks = list(callbacks or []) + added
      if positional:
        args = args[:_CALLBACKS_POSITION] + (callbacks,) + args[_CALLBACKS_POSITION + 1:]
      else:
        kwargs["callbacks"] = callbacks
      if input_of is not None:  # `x`, fit's first parameter.
        # Which strategy reads the input decides whether it may change (parameter servers send it away).
        strategy = getattr(self, "distribute_strategy", None)
        if args:
          args = (input_of(args[0], strategy),) + args[1:]
        elif "x" in kwargs:
          kwargs["x"] = input_of(kwargs["x"], strategy)
    return original(self, *args, **kwargs)

  _originals[model_class] = original
  model_class.fit = fit


def enable_fit_callbacks(make: MakeCallbacks, input_of: Optional[Callable] = None) -> bool:
  """Appends `make(Callback)` to every `fit` of the Kerases imported so far; whether any is.

  `input_of(x, strategy)`, if given, is what such a `fit` reads instead of its
  `x`; `strategy` is the model's `distribute_strategy` (None if it has none).
  """
  for name in KERAS_MODULES:
    if name in sys.modules and hasattr(sys.modules[name], "Model"):
      _patch(sys.modules[name], make, input_of)
  return bool(_originals)


def disable_fit_callbacks() -> None:
  """Puts each Keras's own `fit` back."""
  for model_class, original in _originals.items():
    model_class.fit = original
  _originals.clear()
