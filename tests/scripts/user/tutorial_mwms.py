"""Multi-worker training written the way TensorFlow's "Multi-worker training with
Keras" tutorial writes it: no tfdist, the strategy from TF_CONFIG, local data.

Usage: python tutorial_mwms.py {tf.keras,keras}
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

if sys.argv[1] == "keras":
  import keras
else:
  keras = tf.keras

tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()


def dataset(global_batch_size):
  rng = np.random.default_rng(0)
  x = rng.random((512, 8)).astype("float32")
  y = (x.sum(axis=1) > 4).astype("int64")
  return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(512, seed=0).repeat().batch(
      global_batch_size)


with strategy.scope():
  model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                            keras.layers.Dense(2)])
  model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                optimizer=keras.optimizers.SGD(learning_rate=0.1), metrics=["accuracy"])

history = model.fit(dataset(32 * num_workers), epochs=3, steps_per_epoch=8, verbose=0)
print(f"KERAS: {type(model).__module__.split('.')[0]} "
      f"TRAINED: {[round(v, 6) for v in history.history['loss']]}", flush=True)
