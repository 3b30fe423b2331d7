"""tfdist/training/sparsification.py: top-k and int8 gradient exchange with error feedback."""

import numpy as np
import pytest
import tensorflow as tf

import tfdist
from tfdist import keras
from tfdist.training import sparsification

RNG = np.random.default_rng(0)
X = RNG.normal(size=(64, 8)).astype("float32")
Y = (X @ RNG.normal(size=(8, 1))).astype("float32")


@pytest.fixture(scope="module")
def strategy():
  return tfdist.make_strategy("mirrored")  # two replicas on the suite's two logical CPUs


def _fit(strategy, method=None, *, fraction=0.01, learning_rate=0.05, epochs=1):
  with strategy.scope():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(learning_rate)
    if method:
      optimizer = sparsification.sparsify_gradients(optimizer, model.trainable_variables,
                                                    method=method, fraction=fraction)
    model.compile(optimizer=optimizer, loss="mse")
  history = model.fit(X, Y, batch_size=64, epochs=epochs, shuffle=False, verbose=0)
  return model, history.history["loss"]


@pytest.mark.slow
def test_sending_every_entry_is_the_dense_all_reduce(strategy):
  dense, _ = _fit(strategy, epochs=3)
  top_all, _ = _fit(strategy, "top_k", fraction=1.0, epochs=3)
  int8, _ = _fit(strategy, "int8", epochs=3)
  for a, b, c in zip(top_all.get_weights(), dense.get_weights(), int8.get_weights()):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(c, b, atol=2e-3)  # 8 bits a step, the rest fed back


@pytest.mark.slow
@pytest.mark.parametrize("method", sparsification.METHODS)
def test_what_is_not_sent_waits_in_the_residuals(strategy, method):
  # One SGD step: the weights moved by the sent sum; the replicas' residuals
  # hold the rest of the dense gradient, so together they make the dense step.
  dense, _ = _fit(strategy)
  sparse, _ = _fit(strategy, method, fraction=0.1)
  residuals = [sum(r.numpy() for r in strategy.experimental_local_results(residual))
               for residual in sparse.optimizer.residuals]
  assert max(float(np.abs(r).max()) for r in residuals) > 0
  for moved, unsent, expected in zip(sparse.get_weights(), residuals, dense.get_weights()):
    np.testing.assert_allclose(moved - 0.05 * unsent, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_tenth_of_the_entries_still_trains(strategy):
  _, dense = _fit(strategy, epochs=30)
  _, sparse = _fit(strategy, "top_k", fraction=0.1, epochs=30)
  assert sparse[-1] < 0.1 * sparse[0] and sparse[-1] < 3 * dense[-1], (sparse, dense)


def test_wire_bytes_and_bad_arguments():
  variables = [tf.Variable(tf.zeros((100, 10))), tf.Variable(tf.zeros((10,)))]
  assert sparsification.wire_bytes(variables, method="top_k", fraction=0.01) == 8 * (10 + 1)
  assert sparsification.wire_bytes(variables, method="int8") == 1000 + 4 + 10 + 4
  with pytest.raises(ValueError, match=r"`method` must be one of \['top_k', 'int8'\]. "
                     r"Received: method='int4'"):
    sparsification.wire_bytes(variables, method="int4")
  with pytest.raises(ValueError, match=r"`fraction` must be a number in \(0, 1\]. "
                     r"Received: fraction=0"):
    sparsification.sparsify_gradients(keras.optimizers.SGD(0.1), variables, fraction=0)
  with pytest.raises(TypeError, match=r"tf_keras optimizer instance.*Received: 'sgd'"):
    sparsification.sparsify_gradients("sgd", variables)
