"""Models the benchmarks time: the default job's CNN, a compute-bound convnet, an MLP."""

from typing import Callable

import tf_keras as keras

from tfdist.training import job
from tfdist.training import _user_code as user_code


def mlp() -> keras.Model:
  """MLP 784-512-512-10: a small model whose strategy overhead shows (docs/measuring.md)."""
  return keras.Sequential([keras.Input((784,)), keras.layers.Dense(512, activation="relu"),
                           keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)])


def convnet() -> keras.Model:
  """A compute-bound CNN for `tfdist scale`: wide 3x3 convolutions on the 8x8 digits.

  223k parameters (0.9 MB of gradients) against about 0.7 ms of compute per
  example on one core here: far more compute per byte synchronised than the
  default job's CNN, whose 10 ms steps at batch 1024 are dwarfed by MWMS's
  per-step latency on localhost.
  """
  return keras.Sequential([
      keras.Input((8, 8, 1)),
      keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
      keras.layers.Conv2D(128, 3, padding="same", activation="relu"),
      keras.layers.Conv2D(128, 3, padding="same", activation="relu"),
      keras.layers.GlobalAveragePooling2D(),
      keras.layers.Dense(10)])


MODELS = {"cnn": (job.small_cnn, (8, 8, 1)), "convnet": (convnet, (8, 8, 1)),
          "mlp": (mlp, (784,))}


def model_fn(name_or_path: str) -> Callable:
  """`tfdist scale`'s and `advise`'s --model: a name of `MODELS`, or your .py file / module.

  Raises:
    ValueError: the file or module does not exist, or defines no `model_fn`.
  """
  if name_or_path in MODELS:
    return MODELS[name_or_path][0]
  return user_code.function(user_code.load_module(name_or_path, "model"), "model_fn", "model")
