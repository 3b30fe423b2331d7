"""Gradient accumulation under 2-worker MultiWorkerMirrored; prints one JSON line starting with RESULT.

Usage: python accumulate_train.py   (once per task, TF_CONFIG set by `tfdist launch`)

tf_keras and Keras 3 `fit`, each in 2 micro-batches per update on 100
examples in global batches of 32 (the last one has 4), 1 epoch; each is compared with the same model trained by `fit` on one device
on the whole batches: the largest weight difference, and the updates made.
"""

import json

import numpy as np

import tfdist

strategy = tfdist.make_strategy("multi_worker_mirrored")  # Before any other TF op.

import tensorflow as tf  # pylint: disable=g-import-not-at-top
import keras  # pylint: disable=g-import-not-at-top

rng = np.random.default_rng(0)
x = rng.random((100, 4)).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)


def compiled(library, scope):
  library.utils.set_random_seed(0)
  with scope.scope():
    model = library.Sequential([library.Input((4,)), library.layers.Dense(
        3, activation="tanh", kernel_regularizer=library.regularizers.L2(0.01)),
                                library.layers.Dense(1)])
    model.compile(optimizer=library.optimizers.Adam(0.05, global_clipnorm=0.5), loss="mse")
  return model


def difference(model, reference):
  return max(float(np.abs(a - b).max()) for a, b in
             zip(model.get_weights(), reference.get_weights()))


result = {}
for name, library in (("tf_keras", tfdist.keras), ("keras3", keras)):
  reference = compiled(library, tf.distribute.get_strategy())
  reference.fit(data, epochs=1, verbose=0)
  model = tfdist.training.accumulate(compiled(library, strategy), steps=2)
  model.fit(data, epochs=1, verbose=0)
  result[f"fit_{name}"] = {"difference": difference(model, reference),
                           "iterations": int(model.optimizer.iterations.numpy())}
print("RESULT " + json.dumps(result), flush=True)
