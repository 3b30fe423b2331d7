"""`tfdist verify`: exit 1 and the first differing step for a model that trains differently."""

import json

import pytest

import helpers

MODELS = f"{helpers.SCRIPTS}/user/verify_models.py"
DATA = f"{helpers.SCRIPTS}/user/regression_data.py"


@pytest.mark.slow
def test_two_workers_name_the_first_step_a_replica_dependent_layer_changes(tmp_path):
  report = tmp_path / "report.json"
  result = helpers.run(helpers.tfdist_cli(
      "verify", f"--model={MODELS}:replica_dependent_model_fn", f"--data={DATA}",
      "--strategy=multi_worker_mirrored", "--workers=2", "--steps=2", "--batch_size=32",
      "--timeout=240", f"--output={report}"), timeout=300)
  assert result.returncode == 1, result.stdout[-3000:]
  lines = result.stdout.splitlines()
  assert lines[-1].startswith("multi_worker_mirrored (2 replicas) differs from one device at "
                              "step 1: loss by "), result.stdout[-3000:]
  rows = [line.split() for line in lines if line.split()[:1] in (["1"], ["2"])]
  assert len(rows) == 2
  assert all(float(row[-1]) == 0.0 for row in rows)  # The workers agree with each other.
  # The first worker's report, handed back to the launching process, which writes it.
  written = json.loads(report.read_text())
  assert not written["agrees"] and len(written["steps"]) == 2

