"""tfdist.training.fit_step: a multi-worker fit step with one all-reduce, same logs and weights."""

import numpy as np
import pytest
import tensorflow as tf

import helpers
import tfdist
from tfdist import keras
from tfdist.training import compression
from tfdist.training import fit_step


@pytest.mark.slow
def test_one_all_reduce_per_step_with_the_same_logs_and_weights_as_keras():
  runs = {(worker, got["own_metric"], got["variant"]): got
          for worker, got in helpers.launched_results("train_step_compare.py")}
  assert len(runs) == 8
  for own_metric in (False, True):
    ours, theirs = runs[0, own_metric, "tfdist"], runs[0, own_metric, "keras"]
    assert ours["installed"] == fit_step.INSTALLED
    # Keras: the gradients, then a total and a count per Mean (loss, accuracy).
    # Ours: one; a metric with its own result keeps its two.
    assert theirs["collectives"] == (7 if own_metric else 5)
    assert ours["collectives"] == (3 if own_metric else 1)
    assert ours["history"].keys() == theirs["history"].keys()
    for name in theirs["history"]:
      np.testing.assert_allclose(ours["history"][name], theirs["history"][name], rtol=1e-5)
    np.testing.assert_allclose(ours["norms"], theirs["norms"], rtol=1e-5)
    for variant in ("keras", "tfdist"):  # Identical on both workers.
      assert runs[0, own_metric, variant]["weights"] == runs[1, own_metric, variant]["weights"]
      assert runs[0, own_metric, variant]["history"] == runs[1, own_metric, variant]["history"]
  assert runs[0, False, "tfdist"]["history"]["loss"][1] < runs[0, False, "tfdist"]["history"]["loss"][0]


def _compiled(optimizer=None, model_class=keras.Sequential):
  model = model_class([keras.Input((4,)), keras.layers.Dense(1)])
  model.compile(optimizer=optimizer or keras.optimizers.SGD(0.1), loss="mse")
  return model


class _OwnStep(keras.Sequential):
  def train_step(self, data):
    return super().train_step(data)


@pytest.mark.parametrize("make, reason", [
    (lambda: _compiled(), "not multi-worker MultiWorkerMirroredStrategy"),
    (lambda: _compiled(model_class=_OwnStep), "the model has its own train_step"),
    (lambda: _compiled(keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))),
     "the optimizer is not one of tf_keras's own (LossScaleOptimizerV3)"),
    (lambda: _compiled(compression.compress_gradients(keras.optimizers.SGD(0.1))),
     "the optimizer aggregates its own way (compress_gradients)"),
])
def test_where_keras_step_is_kept_it_says_why(make, reason):
  model = make()
  assert fit_step.synchronise_once(model, tf.distribute.get_strategy()) == \
      f"Keras's own step kept: {reason}"
  assert "train_step" not in vars(model)


def test_a_keras3_model_keeps_its_own_trainer():
  import keras as keras3
  model = keras3.Sequential([keras3.Input((4,)), keras3.layers.Dense(1)])
  model.compile(optimizer="sgd", loss="mse")
  assert "not a tf_keras model" in fit_step.synchronise_once(model, tf.distribute.get_strategy())
