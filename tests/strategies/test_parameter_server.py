"""tfdist.strategies._parameter_server: an in-process cluster trains, evaluates, predicts and shards."""

import json

import pytest

import helpers


@pytest.mark.slow
def test_parameter_server_in_process_fit_evaluate_predict_and_sharding():
  result = helpers.run(helpers.python(f"{helpers.SCRIPTS}/pss_train.py", "2"), timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  line = next(l for l in result.stdout.splitlines() if l.startswith("RESULT "))
  report = json.loads(line[len("RESULT "):])
  assert report["losses"][-1] < 0.05 * report["losses"][0]
  assert report["eval_loss"] < 0.05 * report["losses"][0]
  assert report["predictions_shape"] == [256, 1]
  assert report["prediction_mse"] < 0.05 * report["losses"][0]
  # num_ps_shards=2: the kernel is split across both ps tasks.
  assert sorted(d.split("/task:")[1][0] for d in report["kernel_shards"]) == ["0", "1"]
  assert all("/job:ps/" in d for d in report["kernel_shards"])
  assert report["one_coordinator"]
  # On the host network, the servers' exposure is said out loud.
  assert "TensorFlow servers listen on every interface of this machine" in result.stdout
