"""tfdist.data.input_report: the share of step time waiting for data, measured."""

import time

import numpy as np
import pytest
import tensorflow as tf

import tfdist
from tfdist.data import distributed_input as di
from tfdist.data import input_report
from tfdist import keras

X = np.random.default_rng(0).random((2048, 32)).astype("float32")
Y = X.sum(axis=1, keepdims=True)


def sleepy(x, y):  # 30 ms per batch, far above step noise on a busy machine.
  x = tf.py_function(lambda t: (time.sleep(0.03), t)[1], [x], tf.float32)
  return tf.ensure_shape(x, [None, 32]), y


def slow_fn(context):
  return tf.data.Dataset.from_tensor_slices((X, Y)).repeat().batch(64).map(sleepy)


def fast_fn(context):
  return tf.data.Dataset.from_tensor_slices((X, Y)).cache().repeat().batch(64).prefetch(
      tf.data.AUTOTUNE)


def fit_with_report(dataset_fn):
  strategy = tfdist.make_strategy("one_device")
  with strategy.scope():
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
  report = input_report.InputBoundReport(dataset_fn, verbose=False)
  model.fit(di.distribute_function(strategy, dataset_fn), epochs=2, steps_per_epoch=30,
            verbose=0, callbacks=[report])
  return model, report


@pytest.mark.slow
def test_slow_pipeline_is_highly_input_bound_and_cached_one_is_not():
  _, slow = fit_with_report(slow_fn)
  _, fast = fit_with_report(fast_fn)
  assert slow.result.share > 0.5 and slow.result.verdict == "highly input-bound"
  assert fast.result.share < slow.result.share
  assert "input-bound:" in str(slow.result) and "% of step time waiting for data" in str(
      slow.result)


def _train(callbacks, *, layers=(), optimizer="adam", keras=keras):
  """A seeded fit of a small model on `fast_fn`, with `layers` before its output."""
  strategy = tfdist.make_strategy("one_device")
  with strategy.scope():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((32,)), *[make() for make in layers],
                              keras.layers.Dense(1)])
    model.compile(optimizer=optimizer() if callable(optimizer) else optimizer, loss="mse")
  keras.utils.set_random_seed(1)
  model.fit(di.distribute_function(strategy, fast_fn), epochs=3, steps_per_epoch=10,
            verbose=0, callbacks=callbacks)
  return model


def _assert_same_weights(a, b):
  for x, y in zip(a.get_weights(), b.get_weights()):
    np.testing.assert_array_equal(x, y)


@pytest.mark.slow
def test_probes_leave_training_unchanged():
  report = input_report.InputBoundReport(fast_fn, verbose=False)
  probed, plain = _train([report]), _train([])
  assert report.result is not None and len(report.per_epoch) == 2  # Epochs 2 and 3.
  _assert_same_weights(probed, plain)
  for a, b in zip(probed.optimizer.variables(), plain.optimizer.variables()):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_probes_leave_the_step_counter_and_schedules_unchanged():
  # Before: the probe's steps advanced Keras's step counter for good.
  decaying = lambda: keras.optimizers.SGD(
      keras.optimizers.schedules.CosineDecay(0.05, decay_steps=40))
  report = input_report.InputBoundReport(fast_fn, verbose=False)
  probed, plain = _train([report], optimizer=decaying), _train([], optimizer=decaying)
  assert report.result is not None
  assert int(probed._train_counter.numpy()) == int(plain._train_counter.numpy()) == 30
  _assert_same_weights(probed, plain)


def test_a_model_with_random_layers_is_not_probed_and_trains_the_same(capsys):
  # Before: the probe's steps advanced dropout's random ops, so the same seed
  # gave other weights with the report than without.
  layers = (lambda: keras.layers.Dense(16), lambda: keras.layers.Dropout(0.5))
  report = input_report.InputBoundReport(fast_fn, verbose=True)
  probed, plain = _train([report], layers=layers), _train([], layers=layers)
  _assert_same_weights(probed, plain)
  assert report.result is None
  assert "random layers ['dropout" in report.skipped
  assert "input-bound report: not measured: the model has random layers" in capsys.readouterr().out


@pytest.mark.slow
def test_keras3_models_are_probed_and_train_the_same():
  import keras as keras3
  report = input_report.InputBoundReport(fast_fn, verbose=False)
  probed, plain = _train([report], keras=keras3), _train([], keras=keras3)
  assert report.result is not None and len(report.per_epoch) == 2
  _assert_same_weights(probed, plain)  # Weights, and the optimizer's step through them.
  for a, b in zip(probed.optimizer.variables, plain.optimizer.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_keras3_random_layers_are_found():
  import keras as keras3
  layers = (lambda: keras3.layers.Dense(16), lambda: keras3.layers.GaussianNoise(0.1))
  report = input_report.InputBoundReport(fast_fn, verbose=False)
  _train([report], layers=layers, keras=keras3)
  assert report.result is None and "random layers ['gaussian_noise" in report.skipped


@pytest.mark.parametrize("share, verdict", [(0.02, "not input-bound"),
                                            (0.10, "moderately input-bound"),
                                            (0.37, "highly input-bound")])
def test_thresholds(share, verdict):
  assert input_report.InputBound(share, 10.0, 10.0 * (1 - share)).verdict == verdict


@pytest.mark.parametrize("share, service", [(0.10, False), (0.25, True)])
def test_the_tf_data_service_is_suggested_past_20_percent(share, service):
  suggestion = input_report.InputBound(share, 10.0, 10.0 * (1 - share)).suggestion
  assert "tfdist.data.build" in suggestion
  assert ("tf.data service: `tfdist launch --data_workers N` and "
          "`tfdist.data.service.distribute(dataset)`" in suggestion) == service


def test_custom_loop_function():
  step = tf.function(lambda batch: tf.reduce_sum(batch[0]))
  slow = input_report.input_wait_share(iter(slow_fn(None)), step, steps=10)
  fast = input_report.input_wait_share(iter(fast_fn(None)), step, steps=10)
  assert slow.share > 0.8 and slow.step_ms >= 30
  assert fast.share < slow.share
