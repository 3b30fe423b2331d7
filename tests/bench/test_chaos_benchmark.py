"""benchmarks/chaos.py: one fault of each kind, survived, and the job ends exact."""

import json
import os

import pytest

import helpers

SCRIPT = os.path.join(helpers.REPO, "benchmarks", "chaos.py")


@pytest.mark.slow
def test_one_fault_of_each_kind_is_survived_exactly_with_nothing_left_over(tmp_path):
  out = tmp_path / "chaos.json"
  result = helpers.run(helpers.python(SCRIPT, "--faults=3", "--seed=1", "--examples=12800",
                                      f"--output={out}"), timeout=600)
  assert result.returncode == 0, result.stdout[-3000:]
  report = json.loads(out.read_text())
  assert sorted(f["kind"] for f in report["faults"]) == [
      "sigkill_launcher", "sigkill_worker", "sigterm_launcher"], report
  assert report["result"]["step"] == 600
  assert report["result"]["examples_seen_more_often"] == 0
  assert report["result"]["examples_seen_fewer_times"] == 0
  assert report["result"]["relative_difference"] < 1e-5
  assert sum(report["tasks_left_over"]) == 0 and report["ports_open"] == []
  assert "3 of 3 faults survived" in result.stdout
