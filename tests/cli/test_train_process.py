"""tfdist.cli._train_process: one `tfdist train` in a fresh process, and its result."""

import pytest

from tfdist.cli import _train_process as train_process


@pytest.mark.slow
def test_a_run_that_fails_returns_its_exit_code_and_last_lines(tmp_path):
  result = train_process.run("mirorred", str(tmp_path), keras="tf_keras", epochs=1,
                             batch_size=64, timeout=60)
  assert result["strategy"] == "mirorred" and result["keras"] == "tf_keras"
  assert result["error"] == "exit code 1"
  assert any("value should be one of" in line for line in result["log_tail"])


@pytest.mark.slow
def test_a_run_returns_the_result_the_task_wrote(tmp_path):
  result = train_process.run("one_device", str(tmp_path), keras="keras3", epochs=1,
                             batch_size=256, timeout=120)
  assert "error" not in result, result
  assert result["keras"] == "keras3" and result["replicas"] == 1
  assert len(result["losses"]) == 1 and result["seconds"] > 0
