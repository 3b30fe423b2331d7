"""Two MultiWorkerMirrored workers whose models differ (plain TensorFlow, no tfdist import).

Usage: python differ.py. Worker 1's hidden layer has 64 units, worker 0's 32.
"""

import json
import os

import numpy as np
import tensorflow as tf

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
  model = tf.keras.Sequential([tf.keras.Input((4,)),
                               tf.keras.layers.Dense(64 if index else 32, name="dense"),
                               tf.keras.layers.Dense(1, name="out")])
  model.compile(optimizer="sgd", loss="mse")
x = np.zeros((16, 4), "float32")
model.fit(x, x[:, :1], epochs=1, verbose=0)
print("trained", flush=True)
