"""A model of about 100 MB of weights (25.3M float32), for `tfdist train --model`.

The digits' 8x8 images through two dense layers of 5,000 units; with Adam's two
slots per weight its backup holds about 300 MB. benchmarks/backup_time.py times
its backup after SIGTERM against the default job's.
"""

from tfdist import keras


def model_fn():
  return keras.Sequential([
      keras.Input((8, 8, 1)), keras.layers.Flatten(),
      keras.layers.Dense(5000, activation="relu"),
      keras.layers.Dense(5000, activation="relu"),
      keras.layers.Dense(10)])
