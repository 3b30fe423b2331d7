"""tfdist.advice.scale.measure_worker in this process (the 2-worker runs: tests/advice/test_scaling_model.py)."""

import pytest
import tensorflow as tf

from tfdist.advice import scale


def _measure(counting_model_fn, **kwargs):
  model_fn, made = counting_model_fn
  strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
  result = scale.measure_worker(strategy, model_fn, batch_size=8, steps=5, repeats=1,
                                compress_gradients=False, seed=0, **kwargs)
  return result, int(made[0].optimizer.iterations.numpy())  # made[0]: the synced model.


def test_fits_are_as_many_steps_as_asked_without_a_minimum_length(counting_model_fn):
  result, iterations = _measure(counting_model_fn)
  assert result["steps"] == 5
  assert iterations == 2 * 5  # A warm-up round and one timed round.


@pytest.mark.slow
def test_short_fits_are_lengthened_to_the_minimum_and_the_check_is_longer_still(
    counting_model_fn):
  result, iterations = _measure(counting_model_fn, min_fit_seconds=0.5, longer=2)
  # A step of this model takes milliseconds: half a second is many more than 5.
  assert result["steps"] >= 50
  # Two 5-step calibration fits, then two rounds of "synced" and "synced_check".
  assert iterations == 2 * 5 + 2 * (result["steps"] + 2 * result["steps"])
  assert result["synced_check"] > 0 and result["synced"] > 0
