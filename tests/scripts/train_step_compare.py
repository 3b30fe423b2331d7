"""Keras's own multi-worker fit step beside tfdist's one-all-reduce step, same start.

Keras's step gets `set_distribute_reduction_method`, as tfdist gave it before,
so the difference is the step alone.

Prints, on every worker, a RESULT line per variant: the collectives one step
launches, the epoch logs and a digest of the final weights.
"""

import json

import tfdist

strategy = tfdist.make_strategy("multi_worker_mirrored")

import numpy as np
import tensorflow as tf
from tfdist import keras
from tfdist import _keras_support as keras_support
from tfdist.training import fit_step
from tfdist.training import job
from tfdist._lab import collectives


class DoubledAccuracy(keras.metrics.SparseCategoricalAccuracy):
  """A Mean whose result is its own: read Keras's way, not packed."""

  def result(self):
    return 2 * super().result()


rng = np.random.default_rng(0)
x = rng.random((512, 8, 8, 1)).astype("float32")
y = rng.integers(0, 10, 512)
# Repeated: for a finite dataset TF adds an 8-byte all-reduce per step that
# asks whether every worker still has data (exact last batches).
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()


def build(with_own_metric):
  tf.keras.utils.set_random_seed(1)
  with strategy.scope():
    model = job.small_cnn()
    metrics = ["accuracy"] + ([DoubledAccuracy(name="doubled")] if with_own_metric else [])
    model.compile(keras.optimizers.SGD(0.1),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=metrics)
  return model


for with_own_metric in (False, True):
  for variant in ("keras", "tfdist"):
    model = build(with_own_metric)
    if variant == "tfdist":
      installed = fit_step.synchronise_once(model, strategy)
    else:  # Keras's step, with the output reduction tfdist always removes.
      installed = keras_support.set_distribute_reduction_method(model, strategy)
    model.make_train_function()
    count = collectives.per_step(
        model, iter(strategy.experimental_distribute_dataset(dataset))).count
    history = model.fit(dataset, epochs=2, steps_per_epoch=8, verbose=0).history
    print("RESULT", json.dumps({
        "variant": variant, "own_metric": with_own_metric, "installed": installed,
        "collectives": count, "history": history,
        "weights": job.weights_digest(model.get_weights()),
        "norms": [float(np.linalg.norm(w)) for w in model.get_weights()]}), flush=True)
