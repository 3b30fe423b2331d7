"""Two MultiWorkerMirrored workers that disagree, in one way per MODE (tf.keras `fit`).

Usage: python disagree.py MODE (once per task, with TF_CONFIG; no tfdist import but in
`devices`).
  wider:           worker 1's hidden layer has 64 units, worker 0's 32 (a per-host config
                   gone wrong);
  layer_more:      worker 1 builds one more Dense layer before its last;
  layer_more_loop: the same, trained by a custom loop of `strategy.run` instead of `fit`;
  variable_fewer:  worker 1's last layer has no bias: a variable fewer;
  variable_more:   worker 1 makes one variable more once its model is compiled, the last it
                   makes (worker 0 is in `fit` by then, waiting in its first collective);
  devices:         worker 0 has 2 replicas (2 logical CPUs), worker 1 one;
  keras:           worker 0 trains with tf_keras, worker 1 with Keras 3;
  no_strategy:     worker 1 builds no strategy and fits alone;
  hang_build:      worker 1 blocks forever while it builds its model, after its strategy exists;
  same:            nothing differs (a healthy job).
Prints "trained" at the end.
"""

import json
import os
import sys
import threading

mode = sys.argv[1]
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
if mode == "keras":  # One host's environment differs.
  os.environ["TF_USE_LEGACY_KERAS"] = "1" if index == 0 else "0"

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

if mode == "devices":
  import tfdist  # pylint: disable=g-import-not-at-top
  replicas = 2 if index == 0 else 1
  tfdist.devices.split_physical_device(replicas)
  strategy = tfdist.make_strategy("multi_worker_mirrored", devices_per_worker=replicas)
elif mode == "no_strategy" and index == 1:
  strategy = tf.distribute.get_strategy()  # The default: this task alone.
else:
  strategy = tf.distribute.MultiWorkerMirroredStrategy()


def build_model():
  if mode == "hang_build" and index == 1:
    threading.Event().wait()  # A config read from a hung file system.
  layers = [tf.keras.Input((4,)),
            tf.keras.layers.Dense(64 if mode == "wider" and index == 1 else 32, name="dense")]
  if mode.startswith("layer_more") and index == 1:
    layers.append(tf.keras.layers.Dense(32, name="dense_1"))
  layers.append(tf.keras.layers.Dense(1, use_bias=not (mode == "variable_fewer" and index == 1),
                                      name="out"))
  return tf.keras.Sequential(layers)


x = np.ones((16, 4), "float32")
with strategy.scope():
  model = build_model()
  model.compile(optimizer="sgd", loss="mse")
  if mode == "variable_more" and index == 1:
    extra = tf.Variable(0.0, name="extra")
if mode == "layer_more_loop":
  @tf.function
  def step(batch):
    return strategy.run(lambda b: tf.reduce_sum([tf.reduce_sum(v) for v in
                                                 model.trainable_variables]) + tf.reduce_sum(b),
                        args=(batch,))
  strategy.reduce("SUM", step(tf.constant(x)), axis=None)
else:
  model.fit(x, x[:, :1], epochs=1, batch_size=8, verbose=0)
print("trained", flush=True)
