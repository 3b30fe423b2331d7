"""Keras `evaluate` on 2 MultiWorkerMirrored workers: 1001 examples, global batch 64.

Usage (once per task, with TF_CONFIG): python evaluate_count.py {keras3,tf_keras}.
Prints one RESULT line of JSON: the examples counted by a metric, the loss, and
the loss of the same weights over all 1001 examples at once.
"""
import json
import sys

import tfdist

strategy = tfdist.make_strategy("multi_worker_mirrored")

import numpy as np
import tensorflow as tf

keras = __import__("keras") if sys.argv[1] == "keras3" else tfdist.keras


class Count(keras.metrics.Metric):
  """The examples evaluated: padding or repeated batches would show here."""

  def __init__(self, name="count", **kwargs):
    super().__init__(name=name, **kwargs)
    self.examples = self.add_weight(name="examples", shape=(), initializer="zeros")

  def update_state(self, y_true, y_pred, sample_weight=None):
    self.examples.assign_add(tf.cast(tf.shape(y_true)[0], tf.float32))

  def result(self):
    return self.examples


x = np.random.default_rng(0).random((1001, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
with strategy.scope():
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
  model.compile(optimizer="sgd", loss="mse", metrics=[Count()])
result = model.evaluate(tf.data.Dataset.from_tensor_slices((x, y)).batch(64), verbose=0,
                        return_dict=True)
print("RESULT " + json.dumps({"examples": float(result["count"]), "loss": float(result["loss"]),
                              "true_loss": float(np.mean((np.asarray(model(x)) - y) ** 2))}),
      flush=True)
