"""`tfdist doctor`: its exit codes and --check_keras (the report is tfdist._doctor's)."""

import re

import pytest

import helpers


@pytest.mark.slow
def test_cli_exit_codes():
  ok = helpers.run(helpers.tfdist_cli("doctor"), timeout=120)
  assert ok.returncode == 0, ok.stdout[-2000:]
  assert "no problems found" in ok.stdout
  bad = helpers.run(helpers.tfdist_cli("doctor"), timeout=120,
                    env={"TF_CONFIG": '{"cluster": {"worker": ["h:1"]}, "task": {"type": '
                                      '"worker", "index": 3}}'})
  assert bad.returncode == 1
  assert "`task.index` is out of range for job 'worker'" in bad.stdout


@pytest.mark.slow
def test_check_keras_measures_each_cell_by_training_it():
  result = helpers.run(helpers.tfdist_cli("doctor", "--check_keras=one_device"), timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  measured = result.stdout.split("(tfdist train, measured here)")[1].split("\n\n")[0]
  for keras in ("tf_keras", "keras3  "):
    assert re.search(rf"{keras} one_device +works \(measured: loss ([\d.]+) -> ([\d.]+) in "
                     r"2 epochs", measured), measured
  assert "parameter_server" not in measured  # Only the cells asked for.


def test_check_keras_names_the_valid_strategies():
  result = helpers.run(helpers.tfdist_cli("doctor", "--check_keras=mirorred"), timeout=60)
  assert result.returncode != 0
  assert "--check_keras takes 'all' or strategies of ['one_device'" in result.stdout
