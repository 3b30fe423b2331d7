"""tfdist: tf.distribute strategies, clusters and launchers for Keras users.

Example:

    >>> import tfdist
    >>> from tfdist import keras          # tf_keras: trains under every strategy
    >>> strategy = tfdist.make_strategy("mirrored")
    >>> with strategy.scope():
    ...   model = keras.Sequential([keras.layers.Dense(10)])
    ...   model.compile(optimizer="sgd", loss="mse")

Importing tfdist imports no TensorFlow and changes nothing for other code (not
even `os.environ`): TensorFlow loads on first use of an attribute. Whichever
Keras a model comes from, tfdist handles it; to make `tf.keras` itself resolve
to tf_keras, call `tfdist.use_legacy_keras()` before anything touches it.
"""

import importlib

# The output policy (tfdist.output): the `tfdist` logger shows INFO on stdout
# until the application configures logging. Imports no TensorFlow.
from tfdist import output as _output  # pylint: disable=unused-import

__version__ = "0.2.0"

# Public name -> (module, attribute or None for the module itself). Loaded lazily
# so that `import tfdist` stays cheap for launchers and CLIs.
_EXPORTS = {
    "keras": ("tf_keras", None),
    "use_legacy_keras": ("tfdist._keras_support", "use_legacy_keras"),
    "ClusterSpec": ("tfdist.cluster", "ClusterSpec"),
    "TaskSpec": ("tfdist.cluster", "TaskSpec"),
    "make_strategy": ("tfdist.strategies", "make_strategy"),
    "available_strategies": ("tfdist.strategies", "available_strategies"),
    "global_batch_size": ("tfdist.training.scaling", "global_batch_size"),
    "per_replica_batch_size": ("tfdist.training.scaling", "per_replica_batch_size"),
    "scale_learning_rate": ("tfdist.training.scaling", "scale_learning_rate"),
    "WarmUp": ("tfdist.training.scaling", "WarmUp"),
    "compress_gradients": ("tfdist.training.compression", "compress_gradients"),
    "export": ("tfdist.training.saved_model", "export"),
    "verify": ("tfdist.training.verification", "verify"),
    "advise": ("tfdist.advice._advice", "advise"),
    "advice": ("tfdist.advice", None),
    "cluster": ("tfdist.cluster", None),
    "devices": ("tfdist.devices", None),
    "strategies": ("tfdist.strategies", None),
    "data": ("tfdist.data", None),
    "launch": ("tfdist.launch", None),
    "Loop": ("tfdist.training.loop", "Loop"),
    "training": ("tfdist.training", None),
    "output": ("tfdist.output", None),
    "placement": ("tfdist.placement", None),
    "serving": ("tfdist.serving", None),
    # The task side: a step's report to the launcher's stall watchdog
    # (tfdist.task.progress; tfdist.training.step_done in a custom loop).
    "task": ("tfdist.task", None),
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
  if name not in _EXPORTS:
    raise AttributeError(f"module 'tfdist' has no attribute {name!r}")
  module_name, attribute = _EXPORTS[name]
  try:
    value = importlib.import_module(module_name)
  except ModuleNotFoundError as e:
    if e.name not in ("tensorflow", "tf_keras"):
      raise
    # TensorFlow is the user's (setup.cfg): name what to install, not only what is missing.
    if e.name == "tf_keras":  # Keras 3 alone: only what needs tf_keras says so.
      from tfdist import _keras_support  # pylint: disable=import-outside-toplevel
      if isinstance(e, _keras_support.TfKerasNotInstalled):
        raise
      raise _keras_support.tf_keras_missing("" if name == "keras" else f"tfdist.{name}") from e
    from tfdist import _stack  # pylint: disable=import-outside-toplevel
    raise ModuleNotFoundError(_stack.missing(e.name), name=e.name) from e
  if attribute is not None:
    value = getattr(value, attribute)
  globals()[name] = value
  return value


def __dir__():
  return __all__
