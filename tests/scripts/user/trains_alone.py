"""Two common slips under a 2-worker TF_CONFIG, one per worker: each trains alone.

Worker 0 builds `tf.distribute.MirroredStrategy()` (it reads no TF_CONFIG) and
fits a Keras 3 model under it; worker 1 fits a tf_keras model with no strategy.
"""

import json
import os

import numpy as np
import tensorflow as tf

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
x = np.random.default_rng(index).random((32, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
if index == 0:
  import keras
  with tf.distribute.MirroredStrategy().scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
else:
  import tf_keras as keras
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
history = model.fit(x, y, batch_size=8, epochs=1, verbose=0)
print(f"TRAINED: {type(model).__module__.split('.')[0]}", flush=True)
