"""A multi-worker job that trains for a long time and records its pid per task.

Usage: python mwms_long.py PID_DIR
"""

import json
import os
import sys

import tfdist

strategy = tfdist.make_strategy("multi_worker_mirrored")

import numpy as np
from tfdist import keras

task = json.loads(os.environ["TF_CONFIG"])["task"]
x = np.random.default_rng(0).random((256, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
with strategy.scope():
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
  model.compile(optimizer="sgd", loss="mse")


class Started(keras.callbacks.Callback):
  def on_epoch_end(self, epoch, logs=None):
    if epoch == 0:  # Training really runs: now record the pid.
      with open(os.path.join(sys.argv[1], f"{task['type']}-{task['index']}"), "w") as f:
        f.write(str(os.getpid()))


model.fit(x, y, batch_size=16, epochs=100000, verbose=0, callbacks=[Started()])
