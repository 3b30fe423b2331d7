"""tfdist.internals.strategy_watch: which strategy a task builds, and which one `fit` runs under."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tfdist.internals import strategy_watch

# Version-sensitive: `make test-versions` runs it on the oldest and newest supported TensorFlow too.
pytestmark = pytest.mark.versions


def test_the_strategy_watch_sees_every_strategy_built_until_undone():
  seen = []
  assert strategy_watch.enable_strategy_watch(seen.append)
  try:
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    assert seen == [strategy]
  finally:
    strategy_watch.disable_strategy_watch()
  tf.distribute.OneDeviceStrategy("/cpu:0")
  assert len(seen) == 1  # Undone: TF's own constructor again.


def test_the_fit_watch_sees_the_model_before_fit_until_undone():
  seen = []
  model = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
  model.compile(optimizer="sgd", loss="mse")
  own_fit = tf_keras.Model.fit
  assert strategy_watch.enable_fit_watch(tf_keras.Model, seen.append)
  try:
    model.fit(np.zeros((4, 2)), np.zeros((4, 1)), verbose=0)
    assert seen == [model]
  finally:
    strategy_watch.disable_fit_watch()
  assert tf_keras.Model.fit is own_fit
