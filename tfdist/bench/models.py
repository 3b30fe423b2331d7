"""Models the benchmarks time: the default job's CNN, a compute-bound convnet, an MLP."""

import tf_keras as keras

from tfdist import training


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


MODELS = {"cnn": (training.small_cnn, (8, 8, 1)), "convnet": (convnet, (8, 8, 1)),
          "mlp": (mlp, (784,))}
