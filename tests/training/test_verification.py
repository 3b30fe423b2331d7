"""tfdist.verify: a model that trains as on one device passes; one that does not is named at its first step."""

import numpy as np
import pytest
import tensorflow as tf

import helpers
import tfdist
from tfdist.training import _user_code as user_code

MODELS = f"{helpers.SCRIPTS}/user/verify_models.py"
verify_models = user_code.load_module(MODELS, "model")


def _dataset():
  x = np.random.default_rng(0).random((100, 4)).astype("float32")
  y = x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(32)


@pytest.mark.slow
def test_a_model_that_trains_as_on_one_device_passes_and_one_that_does_not_is_named():
  report = tfdist.verify(verify_models.model_fn, _dataset, strategy="mirrored", steps=2)
  assert report.agrees and report.first_difference is None, report.summary()
  assert [row.step for row in report.steps] == [1, 2]
  assert report.replicas == 2
  assert max(max(row.loss_difference, row.gradient_difference, row.weight_difference,
                 row.replica_difference) for row in report.steps) < 1e-5
  assert report.summary() == ("mirrored (2 replicas) agrees with one device for 2 steps "
                              "within 1e-05")
  report = tfdist.verify(verify_models.replica_dependent_model_fn, _dataset,
                         strategy="mirrored", steps=1)
  assert not report.agrees
  assert (report.first_difference, report.what) == (1, "loss")
  assert report.steps[0].loss_difference > 1e-3
  assert report.steps[0].replica_difference == 0.0  # The replicas still agree with each other.
  assert report.summary().startswith("mirrored (2 replicas) differs from one device at step 1: "
                                     "loss by ")


def test_bad_arguments_name_the_field_and_the_value():
  with pytest.raises(ValueError, match=r"`steps` must be an integer >= 1. Received: steps=0"):
    tfdist.verify(verify_models.model_fn, _dataset, steps=0)
  with pytest.raises(ValueError, match=r"`tolerance` must be > 0. Received: tolerance=0"):
    tfdist.verify(verify_models.model_fn, _dataset, tolerance=0)
  with pytest.raises(ValueError, match=r"must return a compiled model.*Received: Sequential"):
    tfdist.verify(lambda: tfdist.keras.Sequential([tfdist.keras.Input((4,)),
                                                   tfdist.keras.layers.Dense(1)]), _dataset)
