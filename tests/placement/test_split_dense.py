"""tfdist/placement/_split_dense.py: one Dense layer split over devices, by columns or rows."""

import numpy as np
import pytest
import tensorflow as tf

from tfdist import keras
from tfdist import placement

DEVICES = ["/cpu:0", "/cpu:1"]


def _dense_and_split(split, *, units=7, inputs=5, activation="tanh", devices=DEVICES):
  dense = keras.layers.Dense(units, activation=activation)
  dense.build((None, inputs))
  return dense, placement.SplitDense.from_dense(dense, devices, split=split)


def _gradients(layer, x):
  @tf.function
  def step():
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(tf.sin(layer(x)))  # not symmetric in the outputs
    return tape.gradient(loss, [x] + layer.trainable_variables)
  return [g.numpy() for g in step()]


@pytest.mark.parametrize("split", placement.SPLITS)
@pytest.mark.parametrize("activation, devices, shape", [
    ("tanh", DEVICES, (6, 5)),
    ("softmax", DEVICES, (6, 5)),  # needs every column: applied after the concatenation
    (None, ["/cpu:0", "/cpu:1", "/cpu:0"], (2, 3, 5)),  # uneven slices, a rank-3 input
])
def test_equals_the_unsplit_dense_forward_and_backward(split, activation, devices, shape):
  dense, split_layer = _dense_and_split(split, activation=activation, devices=devices)
  x = tf.constant(np.random.default_rng(0).normal(size=shape), tf.float32)
  np.testing.assert_allclose(split_layer(x).numpy(), dense(x).numpy(), rtol=1e-6, atol=1e-6)
  dx, *split_grads = _gradients(split_layer, tf.Variable(x))
  whole_dx, kernel_grad, bias_grad = _gradients(dense, tf.Variable(x))
  np.testing.assert_allclose(dx, whole_dx, rtol=1e-6, atol=1e-6)
  kernels = split_grads[:len(devices)] if split == "rows" else split_grads[0::2]
  biases = split_grads[len(devices):] if split == "rows" else split_grads[1::2]
  np.testing.assert_allclose(np.concatenate(kernels, axis=1 if split == "columns" else 0),
                             kernel_grad, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(np.concatenate(biases), bias_grad, rtol=1e-6, atol=1e-6)
  for a, b in zip(split_layer.dense_weights(), dense.get_weights()):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("split", placement.SPLITS)
def test_each_slice_lives_and_computes_on_its_device(split):
  _, split_layer = _dense_and_split(split, units=8, inputs=6)
  assert [k.device[-5:] for k in split_layer.kernels] == ["CPU:0", "CPU:1"]
  assert [tuple(k.shape) for k in split_layer.kernels] == \
      ([(6, 4), (6, 4)] if split == "columns" else [(3, 8), (3, 8)])
  x = tf.Variable(tf.ones((4, 6)))

  def step():
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(split_layer(x))
    return tape.gradient(loss, [x] + split_layer.trainable_variables)
  graph = tf.function(step).get_concrete_function().graph
  matmuls = [op.device[-5:] for op in graph.get_operations() if op.type == "MatMul"]
  # One forward and two backward multiplies per slice, each on the slice's device.
  assert sorted(matmuls) == ["CPU:0"] * 3 + ["CPU:1"] * 3, matmuls


def test_trains_under_fit_as_the_unsplit_model_does():
  # Seeded: from some initial weights the first epoch already fits well, and the loss
  # cannot halve after it (a CI run started at 0.35 and ended at 0.20).
  keras.utils.set_random_seed(0)
  rng = np.random.default_rng(0)
  x = rng.normal(size=(64, 6)).astype("float32")
  y = np.tanh(x @ rng.normal(size=(6, 1))).astype("float32")
  whole = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="relu"),
                            keras.layers.Dense(1)])
  split = keras.Sequential([
      keras.Input((6,)),
      placement.SplitDense(16, DEVICES, split="columns", activation="relu"),
      placement.SplitDense(1, DEVICES, split="rows")])
  for layer, dense in zip(split.layers, whole.layers):
    layer.set_dense_weights(dense.get_weights())
  histories = []
  for model in (whole, split):
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    histories.append(model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0))
  assert histories[1].history["loss"][-1] < 0.5 * histories[1].history["loss"][0]
  np.testing.assert_allclose(histories[1].history["loss"], histories[0].history["loss"],
                             rtol=1e-5)
  for layer, dense in zip(split.layers, whole.layers):
    for a, b in zip(layer.dense_weights(), dense.get_weights()):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_starts_from_one_kernel_drawn_for_the_whole_layer():
  layer = placement.SplitDense(6, DEVICES, kernel_initializer=keras.initializers.Constant(
      np.arange(24, dtype="float32").reshape(4, 6)))
  layer.build((None, 4))
  np.testing.assert_array_equal(layer.dense_weights()[0], np.arange(24).reshape(4, 6))
  config = layer.get_config()
  assert (config["units"], config["devices"], config["split"]) == (6, DEVICES, "columns")
  assert placement.SplitDense.from_config(config).split == "columns"


def test_bad_arguments_are_refused_with_what_was_received():
  with pytest.raises(ValueError, match=r"`split` must be one of \['columns', 'rows'\]. "
                     r"Received: split='diagonal'"):
    placement.SplitDense(4, DEVICES, split="diagonal")
  with pytest.raises(ValueError, match=r"at least one output per device: 1 unit\(s\) on 2"):
    placement.SplitDense(1, DEVICES)
  with pytest.raises(ValueError, match=r"`devices` must be a non-empty list.*Received: "
                     r"devices='/cpu:0'"):
    placement.SplitDense(4, "/cpu:0")
  with pytest.raises(ValueError, match=r"at least one input per device: 1 input\(s\) on 2"):
    placement.SplitDense(4, DEVICES, split="rows").build((None, 1))
  with pytest.raises(ValueError, match=r"inputs' last dimension.*Received: input_shape=\(None, None\)"):
    placement.SplitDense(4, DEVICES).build((None, None))
  with pytest.raises(TypeError, match=r"takes a tfdist.keras.layers.Dense layer. Received: "
                     r"tf_keras.*Conv1D"):
    placement.SplitDense.from_dense(keras.layers.Conv1D(2, 1), DEVICES)
  with pytest.raises(ValueError, match=r"build the layer first. Received: 2 array\(s\), "
                     r"built=False"):
    placement.SplitDense(4, DEVICES).set_dense_weights([np.zeros((2, 4)), np.zeros(4)])


def _regression(seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(64, 6)).astype("float32")
  return x, np.tanh(x @ rng.normal(size=(6, 1))).astype("float32")


@pytest.mark.slow
def test_trains_under_a_mirrored_strategy_as_the_unsplit_model_does():
  x, y = _regression()
  strategy = tf.distribute.MirroredStrategy(DEVICES)
  with strategy.scope():
    whole = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    split = keras.Sequential([
        keras.Input((6,)),
        placement.SplitDense(16, DEVICES, split="columns", activation="relu"),
        placement.SplitDense(1, DEVICES, split="rows")])
    for layer, dense in zip(split.layers, whole.layers):
      layer.set_dense_weights(dense.get_weights())
    histories = []
    for model in (whole, split):
      model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
      histories.append(model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0))
  np.testing.assert_allclose(histories[1].history["loss"], histories[0].history["loss"],
                             rtol=1e-5)
  for layer, dense in zip(split.layers, whole.layers):
    for a, b in zip(layer.dense_weights(), dense.get_weights()):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  # Data parallelism copies every variable to every replica: each slice lives on both
  # devices, so the split saves no memory there (the guide says so).
  kernel = split.layers[0].kernels[1]
  assert sorted(v.device[-5:] for v in kernel.values) == ["CPU:0", "CPU:1"]


@pytest.mark.slow
def test_keras3_split_equals_the_unsplit_dense_and_trains_under_mirrored():
  import keras as keras3  # pylint: disable=import-outside-toplevel
  x, y = _regression(1)
  dense = keras3.layers.Dense(7, activation="tanh")
  dense.build((None, 6))
  split = placement.Keras3SplitDense.from_dense(dense, DEVICES, split="rows")
  assert [k.value.device[-5:] for k in split.kernels] == ["CPU:0", "CPU:1"]
  np.testing.assert_allclose(split(x).numpy(), dense(x).numpy(), rtol=1e-6, atol=1e-6)
  dx, *grads = _gradients(split, tf.Variable(x))
  whole_dx, kernel_grad, bias_grad = _gradients(dense, tf.Variable(x))
  np.testing.assert_allclose(dx, whole_dx, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(np.concatenate(grads[:2]), kernel_grad, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(grads[2], bias_grad, rtol=1e-6, atol=1e-6)
  histories = []
  with tf.distribute.MirroredStrategy(DEVICES).scope():
    keras3.utils.set_random_seed(0)
    whole = keras3.Sequential([keras3.Input((6,)), keras3.layers.Dense(16, activation="relu"),
                               keras3.layers.Dense(1)])
    split = keras3.Sequential([
        keras3.Input((6,)),
        placement.Keras3SplitDense(16, DEVICES, split="columns", activation="relu"),
        placement.Keras3SplitDense(1, DEVICES, split="rows")])
    for layer, dense in zip(split.layers, whole.layers):
      layer.set_dense_weights(dense.get_weights())
    for model in (whole, split):
      model.compile(optimizer=keras3.optimizers.SGD(0.1), loss="mse")
      histories.append(model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0))
  assert histories[1].history["loss"][-1] < histories[1].history["loss"][0]
  np.testing.assert_allclose(histories[1].history["loss"], histories[0].history["loss"],
                             rtol=1e-5)
  config = split.layers[0].get_config()
  assert placement.Keras3SplitDense.from_config(config).devices == DEVICES


def test_a_keras3_model_is_told_which_layer_to_use():
  import keras as keras3  # pylint: disable=import-outside-toplevel
  with pytest.raises(TypeError, match=r"SplitDense is a tf_keras layer.*use "
                     r"tfdist.placement.Keras3SplitDense.*Received: keras\..*KerasTensor"):
    placement.SplitDense(4, DEVICES)(keras3.Input((6,)))
  with pytest.raises(TypeError, match=r"Keras3SplitDense.from_dense takes a keras.layers.Dense "
                     r"\(Keras 3\) layer. Received: tf_keras.*Dense"):
    placement.Keras3SplitDense.from_dense(keras.layers.Dense(2), DEVICES)
