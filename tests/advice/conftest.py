"""Fixtures shared by the tests of tfdist.advice's measurements (candidates, scale)."""

import pytest
import tf_keras


@pytest.fixture
def counting_model_fn():
  """A tiny model_fn that keeps every model it builds, to read their optimizers' step counts.

  Returns (model_fn, made): `made` lists the models in the order they were built.
  """
  made = []

  def model_fn():
    model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(2)])
    made.append(model)
    return model

  return model_fn, made
