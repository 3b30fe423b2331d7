"""tfdist.advice.memory: a replica's bytes, counted from a real model."""

import pytest
import tensorflow as tf
import tf_keras as keras

from tfdist.advice import memory


def mlp(optimizer):
  model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(20, activation="relu"),
                            keras.layers.BatchNormalization(), keras.layers.Dense(5)])
  model.compile(optimizer=optimizer, loss="mse")
  return model


def test_weights_gradients_slots_and_activations_are_counted():
  model = mlp(keras.optimizers.Adam())
  f = memory.footprint(model, batch_size=8)
  trainable = (10 * 20 + 20) + (2 * 20) + (20 * 5 + 5)  # BN's mean and variance are not.
  assert f.gradients == 4 * trainable
  assert f.weights == 4 * (trainable + 2 * 20)
  # Adam: two slots per trainable weight, and its scalars (iterations, learning rate).
  assert 2 * f.gradients <= f.slots <= 2 * f.gradients + 16
  assert f.activations == 4 * 8 * (20 + 20 + 5)
  assert f.total == f.weights + f.gradients + f.slots + f.activations
  sgd = memory.footprint(mlp(keras.optimizers.SGD()), batch_size=8)
  # tf_keras's SGD keeps a momentum slot even at momentum 0.
  assert sgd.gradients <= sgd.slots <= sgd.gradients + 16


def test_activations_grow_with_the_batch_and_split_over_devices():
  f = memory.footprint(mlp(keras.optimizers.SGD()), batch_size=8)
  assert f.at_batch(32, counted_at=8).activations == 4 * f.activations
  assert f.at_batch(32, counted_at=8).weights == f.weights
  assert f.devices_needed(f.total) == 1 and f.devices_needed(f.total / 2.5) == 3
  with pytest.raises(ValueError, match="Received: 0"):
    f.devices_needed(0)


def test_an_uncompiled_model_is_refused_with_the_fix():
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  with pytest.raises(ValueError, match="call model.compile.*Received: a model with optimizer"):
    memory.footprint(model, batch_size=4)


def test_the_peak_is_none_on_a_device_this_machine_lacks_and_counts_what_a_cpu_held():
  assert memory.peak_bytes("GPU:7") is None
  held = tf.ones((1024, 1024))  # 4 MiB.
  assert memory.peak_bytes("CPU:0") >= held.numpy().nbytes
