"""tfdist.advice.memory: a replica's bytes, counted from a real model."""

import pytest
import tf_keras as keras

import helpers
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


def test_the_peak_is_none_on_a_device_this_machine_lacks():
  assert memory.peak_bytes("GPU:7") is None


# What a CPU held, in a fresh process: TensorFlow keeps CPU allocator stats only with oneDNN
# on, its default on x86 CPUs with AVX-512 (a CI machine without it failed a test that
# assumed them). TF_ENABLE_ONEDNN_OPTS sets it either way, on any x86 machine.
_HOLD_4_MIB = ("import tensorflow as tf\nfrom tfdist.advice import memory\n"
               "held = tf.ones((1024, 1024))\nprint('PEAK', memory.peak_bytes('CPU:0'))")


@pytest.mark.slow
@pytest.mark.parametrize("onednn, expected", [("1", "counted"), ("0", "None")])
def test_the_peak_on_a_cpu_counts_what_it_held_where_tensorflow_keeps_stats(onednn, expected):
  result = helpers.run(helpers.python("-c", _HOLD_4_MIB), timeout=120,
                       env={"TF_ENABLE_ONEDNN_OPTS": onednn})
  assert result.returncode == 0, result.stdout[-2000:]
  peak = result.stdout.split("PEAK ")[1].split()[0]
  if expected == "None":
    assert peak == "None", result.stdout[-500:]
  else:
    assert int(peak) >= 4 * 2**20, result.stdout[-500:]