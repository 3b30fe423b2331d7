"""A 2-worker MultiWorkerMirrored `fit` of one epoch of about 8 s (verbose=1), for status lines.

Usage: python status_fit.py (under `tfdist launch`: `tf.keras` is the Keras its --keras
chose). Each task's input sleeps 0.4 s a batch of 8, which the strategy splits into two
steps of 4 rows: 32 steps of about 0.2 s. At the epoch's end each task prints EPOCH END,
flushed, so that a test can tell what came before it.
"""

import time

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()


def slow(x):
  time.sleep(0.4)  # A slow input: the epoch lasts seconds, its steps are tiny.
  return x


class EpochEnd(tf.keras.callbacks.Callback):

  def on_epoch_end(self, epoch, logs=None):
    print("EPOCH END", flush=True)


x = np.random.default_rng(0).random((256, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
options = tf.data.Options()  # Each task reads every batch: no sharding to wait for.
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF


def load(x, y):
  return tf.ensure_shape(tf.py_function(slow, [x], tf.float32), x.shape), y


dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).map(load).with_options(options)
with strategy.scope():
  model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
  model.compile(optimizer="sgd", loss="mse")
model.fit(dataset, epochs=1, verbose=1, callbacks=[EpochEnd()])
