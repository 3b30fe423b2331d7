"""`tfdist scale`: predicts, checks and draws, as a user runs it (the model is tfdist.advice.scaling_model's)."""

import json
import re

import pytest

import helpers
from tfdist.cluster import ClusterSpec


@pytest.mark.slow
@pytest.mark.alone  # It times steps; another test beside it skews the prediction.
def test_cli_predicts_checks_and_draws(tmp_path):
  out, png = tmp_path / "scale.json", tmp_path / "scale.png"
  # Run where a job's TF_CONFIG is set (a peer that is not there): before, scale
  # took itself for that job's task and waited for the peer; it measures on
  # clusters of its own.
  job = ClusterSpec.local(workers=2)
  result = helpers.run(helpers.tfdist_cli(
      "scale", "--model=cnn", "--steps=10", "--repeats=1", "--pairs=1", f"--plot={png}",
      f"--output={out}"), timeout=600, env={"TF_CONFIG": job.tf_config("worker", 0)})
  assert result.returncode == 0, result.stdout[-3000:]
  written = json.loads(out.read_text())
  assert written["gradient_bytes"] > 0 and written["busbw"] > 0
  assert written["latency_seconds"] >= 0 and written["colocated_seconds"] > 0
  assert 0 < written["measured_efficiency_2"] and 0 < written["predicted_efficiency_2"] <= 1
  assert len(written["measured_efficiency_2_per_pair"]) == 1
  assert "prediction off by" in result.stdout and png.stat().st_size > 0
  assert "predicted on separate machines" in result.stdout and "latency" in result.stdout
  # The step's collectives, traced: one all-reduce for gradients and the loss
  # metric (tfdist.training.fit_step), against raw tf_keras's gradients, total,
  # count and outputs.
  counts = written["collectives_per_step"]
  assert counts == {"raw": 4, "tfdist": 1}, counts
  assert written["raw_two_worker_seconds"] > 0 and written["sync_ratio"] > 0
  assert "raw tf_keras, same rounds" in result.stdout
  assert written["collective_bytes_per_step"]["tfdist"] > 0
  assert re.search(r"collectives +\d+ per step with tfdist's defaults", result.stdout)
  # Which run of how many, and from the second on the time so far and left.
  stages = re.findall(r"^\[(\d)/2\] measuring on (\d) worker\(s\)\.\.\.(.*)$", result.stdout,
                      re.M)
  assert [stage[:2] for stage in stages] == [("1", "1"), ("2", "2")], result.stdout[-3000:]
  assert stages[0][2] == "" and re.fullmatch(
      rf" \({helpers.DURATION} in all, about {helpers.DURATION} left\)", stages[1][2])
