"""tfdist: tf.distribute strategies, clusters and launchers for Keras users.

Example:

>>> import tfdist
>>> from tfdist import keras          # tf_keras: trains under every strategy
>>> strategy = tfdist.make_strategy("mirrored")
>>> with strategy.scope():
...   model = keras.Sequential([keras.layers.Dense(10)])
...   model.compile(optimizer="sgd", loss="mse")

Importing tfdist imports no TensorFlow: it only makes `tf.keras` resolve to
tf_keras (see `keras_support`). TensorFlow loads on first use of an attribute.
"""

import importlib

from tfdist import keras_support as _keras_support

_keras_support.use_legacy_keras()

__version__ = "0.1.0"

# Public name -> (module, attribute or None for the module itself). Loaded lazily
# so that `import tfdist` stays cheap for launchers and CLIs.
_EXPORTS = {
    "keras": ("tf_keras", None),
    "ClusterSpec": ("tfdist.cluster", "ClusterSpec"),
    "TaskSpec": ("tfdist.cluster", "TaskSpec"),
    "make_strategy": ("tfdist.strategies", "make_strategy"),
    "available_strategies": ("tfdist.strategies", "available_strategies"),
    "global_batch_size": ("tfdist.scaling", "global_batch_size"),
    "per_replica_batch_size": ("tfdist.scaling", "per_replica_batch_size"),
    "scale_learning_rate": ("tfdist.scaling", "scale_learning_rate"),
    "scaled_learning_rate": ("tfdist.scaling", "scaled_learning_rate"),
    "WarmUp": ("tfdist.scaling", "WarmUp"),
    "compress_gradients": ("tfdist.gradient_compression", "compress_gradients"),
    "cluster": ("tfdist.cluster", None),
    "devices": ("tfdist.devices", None),
    "strategies": ("tfdist.strategies", None),
    "scaling": ("tfdist.scaling", None),
    "datasets": ("tfdist.datasets", None),
    "launch": ("tfdist.launch", None),
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
  if name not in _EXPORTS:
    raise AttributeError(f"module 'tfdist' has no attribute {name!r}")
  module_name, attribute = _EXPORTS[name]
  value = importlib.import_module(module_name)
  if attribute is not None:
    value = getattr(value, attribute)
  globals()[name] = value
  return value


def __dir__():
  return __all__
