"""benchmarks/chaos.py: one fault of each kind, survived; the exactly-once job ends exact."""

import json
import os

import pytest

import helpers

SCRIPT = os.path.join(helpers.REPO, "benchmarks", "chaos.py")


@pytest.mark.slow
def test_one_fault_of_each_kind_is_survived_with_nothing_left_over(tmp_path):
  out = tmp_path / "chaos.json"
  result = helpers.run(helpers.python(SCRIPT, "--faults=5", "--seed=1", "--examples=3200",
                                      "--nobaseline", f"--output={out}"),
                       timeout=900, env={"TMPDIR": str(tmp_path)})  # Its job folders too.
  assert result.returncode == 0, result.stdout[-3000:]
  jobs = {job["mode"]: job for job in json.loads(out.read_text())["jobs"]}
  kinds = {mode: sorted(f["kind"] for f in job["faults"]) for mode, job in jobs.items()}
  assert kinds == {"mwms": ["sigkill_launcher", "sigkill_worker", "sigterm_launcher"],
                   "data_service": ["sigkill_data_worker"],
                   "parameter_server": ["sigkill_ps_worker"]}, kinds
  exact = jobs["mwms"]["result"]
  assert exact["step"] == 150 and exact["applied"] == 150
  assert exact["examples_seen_more_often"] == 0 and exact["examples_seen_fewer_times"] == 0
  assert exact["relative_difference"] < 1e-5
  # Every step the parameter-server job scheduled was applied, at least once.
  assert jobs["parameter_server"]["result"]["applied"] >= 150
  for job in jobs.values():
    assert job["result"]["step"] == 150, job
    assert sum(job["tasks_left_over"]) == 0 and job["ports_open"] == [], job
  assert "5 of 5 faults survived" in result.stdout
