"""tfdist.advice.scale.measure_worker in this process (the 2-worker runs: tests/advice/test_scaling_model.py)."""

import re

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
  # A step of this model takes milliseconds: half a second is more than 5 of them
  # (about 100 alone, 34 under CI's load: the count follows the machine's speed).
  assert result["steps"] > 5
  # Two 5-step calibration fits, then two rounds of "synced" and "synced_check".
  assert iterations == 2 * 5 + 2 * (result["steps"] + 2 * result["steps"])
  assert result["synced_check"] > 0 and result["synced"] > 0


def _pairs():
  """Two alternated (1-worker, 2-worker) measurements, as `tfdist scale`'s workers write them."""
  one = {"gradient_bytes": 4e6, "synced": 0.020, "plain": 0.018}
  two = {"synced": 0.030, "plain": 0.021, "busbw": 0.3e9, "synced_tiny": 0.004,
         "plain_tiny": 0.001, "raw": 0.034, "gradient_all_reduce": 0.002}
  slower = dict(two, synced=0.032)
  return [(one, two), (one, slower)]


COUNTS = {"collectives_raw": 6, "collectives_tfdist": 1, "collective_bytes_raw": 4096,
          "collective_bytes_tfdist": 2048}


def test_the_report_text_names_what_was_measured_and_the_prediction_checked():
  report = scale.analyse(_pairs())
  text = report.text(model="cnn", per_replica_batch_size=64, counts=COUNTS)
  assert "model cnn, batch 64 per replica; medians of 2 alternated" in text
  assert "1 per step with tfdist's defaults (2.0 KB), 6 with raw tf_keras (4.0 KB)" in text
  assert f"measured {report.measured:.0%}" in text and "prediction off by" in text
  # One row per predicted replica count.
  rows = re.findall(r"^ +(\d+) +[\d.]+ +\d+%$", text, re.M)
  assert [int(n) for n in rows] == [p.replicas for p in report.predictions], text
  assert "float16 on the wire" not in text
  assert "float16 on the wire" in report.text(model="cnn", per_replica_batch_size=64,
                                              counts=COUNTS, compressed=True)


def test_the_report_as_json_keeps_every_number_and_the_counts():
  report = scale.analyse(_pairs())
  written = report.as_dict(per_replica_batch_size=64, counts=COUNTS)
  assert written["measured_efficiency_2_per_pair"] == [0.020 / 0.030, 0.020 / 0.032]
  assert written["per_replica_batch_size"] == 64 and written["gradient_bytes"] == 4e6
  assert written["collectives_per_step"] == {"raw": 6, "tfdist": 1}
  assert set(written["predicted"]) == {p.replicas for p in report.predictions}
  assert written["colocated_seconds"] == pytest.approx(0.020 * (0.021 / 0.018))
