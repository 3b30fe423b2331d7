"""tfdist.training.compression: the all-reduce in float16, float32 everywhere else."""

import re

import numpy as np
import pytest
import tensorflow as tf

import helpers
import tfdist
from tfdist import keras
from tfdist.training.compression import compress_gradients


def _data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(256, 8)).astype("float32")
  w = rng.normal(size=(8, 1)).astype("float32")
  return x, x @ w


def _train(strategy, compress: bool, epochs: int = 20):
  x, y = _data()
  with strategy.scope():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.05)
    model.compile(optimizer=compress_gradients(optimizer) if compress else optimizer, loss="mse")
  history = model.fit(x, y, batch_size=32, epochs=epochs, shuffle=False, verbose=0)
  return model, history.history["loss"]


def test_the_sum_crosses_in_float16_and_returns_float32():
  strategy = tfdist.make_strategy("mirrored")
  assert strategy.num_replicas_in_sync == 2
  with strategy.scope():
    variable = tf.Variable(tf.zeros(3))
    optimizer = compress_gradients(keras.optimizers.SGD(1.0))

  # 1 + 2**-12 is exact in float32 and rounds to 1 in float16: the sum shows the wire.
  @tf.function
  def step():
    def replica_fn():
      gradient = tf.constant([1.0 + 2**-12, 0.5, -2.0])
      (summed, _), = optimizer.aggregate_gradients([(gradient, variable)])
      return summed
    return strategy.run(replica_fn)

  for summed in strategy.experimental_local_results(step()):
    assert summed.dtype == tf.float32
    np.testing.assert_array_equal(summed.numpy(), [2.0, 1.0, -4.0])


@pytest.mark.slow
def test_training_matches_float32_all_reduce():
  _, plain = _train(tfdist.make_strategy("mirrored"), compress=False)
  model, compressed = _train(tfdist.make_strategy("mirrored"), compress=True)
  assert compressed[-1] < 0.1 * compressed[0]
  np.testing.assert_allclose(compressed, plain, rtol=0.02, atol=1e-3)
  assert all(w.dtype == np.float32 for w in model.get_weights())


@pytest.mark.parametrize("compress, expected", [(True, 1.0), (False, 1.0 + 2**-12)])
def test_fit_goes_through_the_float16_all_reduce(compress, expected):
  # Each replica's gradient is -(1 + 2**-12) / 2 (the loss is divided by the
  # global batch of 2): exact in float32, -0.5 in float16. One SGD step (rate 1)
  # from 0 moves the weight by their sum: 1 only if fit's all-reduce ran in
  # float16, 1 + 2**-12 if it ran in float32.
  strategy = tfdist.make_strategy("mirrored")
  with strategy.scope():
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(
        1, use_bias=False, kernel_initializer="zeros")])
    optimizer = keras.optimizers.SGD(1.0)
    model.compile(optimizer=compress_gradients(optimizer) if compress else optimizer,
                  loss=lambda y, p: tf.square(p - y) / 2)
  x = np.ones((2, 1), "float32")
  y = np.full((2, 1), 1.0 + 2**-12, "float32")
  model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0)
  assert float(model.get_weights()[0][0, 0]) == expected


def test_one_replica_is_untouched():
  _, plain = _train(tfdist.make_strategy("one_device"), compress=False, epochs=3)
  _, compressed = _train(tfdist.make_strategy("one_device"), compress=True, epochs=3)
  assert compressed == plain


@pytest.mark.parametrize("optimizer, kwargs, error, match", [
    ("sgd", {}, TypeError, r"needs a tf_keras optimizer instance.*Received: 'sgd'"),
    (None, {"dtype": "int8"}, ValueError,
     r"`dtype` must be one of \['float16'\]. Received: dtype='int8'"),
])
def test_errors(optimizer, kwargs, error, match):
  optimizer = optimizer or keras.optimizers.SGD(0.1)
  with pytest.raises(error, match=match):
    compress_gradients(optimizer, **kwargs)


@pytest.mark.slow
def test_parameter_servers_are_refused():
  # In a child: an in-process PSS connects this process's eager context to its cluster.
  script = """
import pytest, tfdist
from tfdist.training.compression import compress_gradients

strategy = tfdist.make_strategy("parameter_server", in_process=True, network="host",
    cluster=tfdist.ClusterSpec.local(workers=1, ps=1, chief=True))
with strategy.scope(), pytest.raises(ValueError) as error:
  compress_gradients(tfdist.keras.optimizers.SGD(0.1))
print("ERROR", error.value)
"""
  result = helpers.run(helpers.python("-c", script), timeout=120)
  assert result.returncode == 0, result.stdout[-3000:]
  assert re.search(r"ERROR Parameter-server training .* nothing to compress.*Received: a "
                   "ParameterServerStrategy scope", result.stdout)


def _aggregate_once(optimizer, variable, gradient, strategy):
  @tf.function
  def step():
    def replica_fn():
      (summed, _), = optimizer.aggregate_gradients([(tf.constant(gradient), variable)])
      return summed
    return strategy.run(replica_fn)
  return [s.numpy() for s in strategy.experimental_local_results(step())]


def test_small_gradients_travel_scaled_instead_of_flushing_to_zero():
  strategy = tfdist.make_strategy("mirrored")
  with strategy.scope():
    variable = tf.Variable([0.0])
    optimizer = compress_gradients(keras.optimizers.SGD(1.0))
  # 2**-30 is below float16's smallest value (2**-24): cast alone, it would be 0.
  assert float(tf.cast(tf.constant(2.0**-30), tf.float16)) == 0.0
  for summed in _aggregate_once(optimizer, variable, [2.0**-30], strategy):
    assert summed.tolist() == [2.0**-29]


def test_a_float16_overflow_skips_the_step_and_lowers_the_scale():
  # Each replica's gradient is 5e4, the sum 1e5: past float16's 65504 at any
  # scale above 0.5. Steps are skipped, halving the scale from 2**12, until it fits.
  strategy = tfdist.make_strategy("mirrored")
  with strategy.scope():
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(
        1, use_bias=False, kernel_initializer="zeros")])
    optimizer = compress_gradients(keras.optimizers.SGD(1e-6))
    model.compile(optimizer=optimizer, loss=lambda y, p: 1e5 * p)
  x, y = np.ones((2, 1), "float32"), np.zeros((2, 1), "float32")
  model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0)
  assert float(model.get_weights()[0][0, 0]) == 0.0  # Skipped: not NaN, not moved.
  assert int(optimizer.iterations.numpy()) == 1
  assert float(optimizer.wire_scale.read_value()) == 2.0**11
  model.fit(x, y, batch_size=2, epochs=19, shuffle=False, verbose=0)
  assert float(optimizer.wire_scale.read_value()) == 0.5  # 13 halvings, then it fits.
  # The 7 steps that fit each moved the weight by 1e-6 x 1e5.
  assert float(model.get_weights()[0][0, 0]) == pytest.approx(-0.7, rel=1e-3)
  assert int(optimizer.iterations.numpy()) == 20
