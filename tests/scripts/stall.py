"""A 2-worker MultiWorkerMirrored `fit` in plain TensorFlow (no tfdist import), for the watchdog.

Usage: python stall.py MODE MARKER_DIR
  block: worker 1 blocks forever in its input pipeline at its 9th batch, unless
         MARKER_DIR/blocked exists (a restarted job goes through);
  slow:  worker 1's input sleeps 0.1 s a batch, and 4 s before its first batch
         (a first step slower than a short --stall_timeout);
  slow_long: worker 1's input sleeps 0.1 s a batch, over the data 5 times (125
         steps: long enough to be named while it trains);
  heavy: worker 1's input computes for about 0.1 s a batch, in TensorFlow's own ops
         (no Python in the pipeline);
  plain: nothing in the input but the data (TF's profiler aborts now and then beside
         a Python function or heavy ops in a multi-worker task's input:
         docs/known_issues.md).
"""

import json
import os
import sys
import threading
import time

import numpy as np
import tensorflow as tf

mode, marker_dir = sys.argv[1], sys.argv[2]
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
batches = [0]


def wait_forever():
  open(os.path.join(marker_dir, "blocked"), "w").close()
  threading.Event().wait()


def read(x):
  batches[0] += 1
  if mode == "block" and index == 1 and batches[0] == 9 and \
      not os.path.exists(os.path.join(marker_dir, "blocked")):
    wait_forever()
  if mode.startswith("slow") and index == 1:
    time.sleep(4.0 if batches[0] == 1 and mode == "slow" else 0.1)
  return x


def load(x, y):
  if mode == "plain":
    return x, y
  if mode == "heavy":
    if index == 1:  # Matrix products of the batch, so that none is folded away ahead of time.
      big = tf.fill([400, 400], 1e-3) + 1e-9 * tf.reduce_mean(x)
      for _ in range(6):
        big = tf.matmul(big, big) * 1e-3
      x = x + 0 * tf.reduce_sum(big)
    return x, y
  return tf.py_function(read, [x], tf.float32), y


x = np.random.default_rng(0).random((200, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat(5 if mode == "slow_long" else 1)
dataset = dataset.batch(8).map(load).with_options(options)
with strategy.scope():
  model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
  model.compile(optimizer="sgd", loss="mse")
model.fit(dataset, epochs=1, verbose=0)  # 25 steps (125), no epoch boundary in between.
print("final weights", float(tf.reduce_sum(model.trainable_variables[0])), flush=True)
