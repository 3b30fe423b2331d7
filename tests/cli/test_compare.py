"""`tfdist compare`: one model under every strategy, one table, as a user runs it."""

import json
import re

import pytest

import helpers


@pytest.mark.slow
def test_compare_trains_every_strategy_to_single_device_accuracy(tmp_path):
  # The multi-process strategies; mirrored and central_storage against one
  # device are tests/strategies/test_strategies.py's, in one process.
  # Both Kerases' 2-worker cells run here through `tfdist train` (chief, 2
  # workers and a ps for parameter_server; the workers' identical weights are
  # tests/internals/test_keras.py's and the MWMS test's above).
  strategies = ["one_device", "multi_worker_mirrored", "parameter_server"]
  result_file = tmp_path / "compare.json"
  result = helpers.run(helpers.tfdist_cli(
      "compare", "--keras=tf_keras,keras3", f"--strategies={','.join(strategies)}",
      f"--output={result_file}"), timeout=1200)
  assert result.returncode == 0, result.stdout[-3000:]
  rows = json.loads(result_file.read_text())
  assert [(r["keras"], r["strategy"]) for r in rows] == [
      (keras, name) for keras in ("tf_keras", "keras3") for name in strategies]
  assert [r["replicas"] for r in rows] == [1, 2, 1] * 2
  for row in rows:  # Both Kerases, every strategy: single-device tf_keras accuracy.
    assert abs(row["accuracy"] - rows[0]["accuracy"]) <= 0.05, row
  assert rows[0]["accuracy"] > 0.9
  assert "OK: every strategy reached single-device accuracy within tolerance." in result.stdout
  # Each run says which of how many it is, the time so far, and about how long the rest takes.
  assert re.search(r"^\[1/6\] one_device \(tf_keras\) \.\.\. accuracy 0\.\d+ \(\d+ s; "
                   rf"{helpers.DURATION} in all, about {helpers.DURATION} left\)$",
                   result.stdout, re.M), result.stdout
  assert re.search(r"^\[6/6\] parameter_server \(keras3\) .* in all\)$", result.stdout, re.M)
  assert re.search(r"^keras\s+strategy\s+replicas\s+mode\s+accuracy", result.stdout, re.M)
  assert re.search(r"^keras3\s+parameter_server\s+1\s+async\s+0\.9", result.stdout, re.M)


def test_compare_names_the_valid_kerases():
  result = helpers.run(helpers.tfdist_cli("compare", "--keras=keras2"), timeout=60)
  assert result.returncode != 0
  assert "--keras takes ['tf_keras', 'keras3'], comma-separated." in result.stdout


def test_compare_without_tf_keras_refuses_it_by_name_before_training():
  result = helpers.run(helpers.tfdist_cli("compare", "--keras=keras3,tf_keras"), timeout=60,
                       env=helpers.without_tf_keras())
  assert result.returncode == 2, result.stdout[-3000:]
  assert result.stdout.startswith(
      "tfdist compare: --keras=tf_keras needs tf_keras, which is not installed. Install the "
      "one of your TensorFlow's minor version"), result.stdout[-3000:]
  assert ", or use Keras 3 (`import keras`; `--keras=keras3`)." in result.stdout


def test_compare_names_the_valid_sync_intervals():
  result = helpers.run(helpers.tfdist_cli("compare", "--sync_every=4,0"), timeout=60)
  assert result.returncode != 0
  assert "--sync_every takes sync intervals >= 1, comma-separated, e.g. 1,4,16." in result.stdout

