"""`tfdist advise`: the main's flags, exit codes and output.

The measuring is tfdist.advice._advice's (tests/advice/test_advice.py).
"""

import pytest

import helpers


@pytest.mark.slow
def test_a_bad_model_is_refused_before_anything_is_measured():
  done = helpers.run(helpers.tfdist_cli("advise", "--model=no_such_model.py"), timeout=60)
  assert done.returncode == 2
  assert "`--model` names no file" in done.stdout and "timing" not in done.stdout
  assert "Received: 'no_such_model.py'" in done.stdout


@pytest.mark.slow
def test_a_failing_measurement_exits_1_with_its_reason(tmp_path):
  broken = tmp_path / "broken_model.py"
  broken.write_text("def model_fn():\n  raise RuntimeError('no weights for you')\n")
  output = tmp_path / "advice.json"
  done = helpers.run(helpers.tfdist_cli("advise", f"--model={broken}", "--steps=5",
                                        "--repeats=1", f"--output={output}"), timeout=180)
  assert done.returncode == 1
  # The main shows the library's progress: which stage of how many (no input stage for a
  # model file without data, no 2-worker stage for one worker).
  assert "  [1/1] timing the ways on" in done.stdout, done.stdout
  assert "tfdist advise: the local measurement" in done.stdout
  assert "no weights for you" in done.stdout and not output.exists()
