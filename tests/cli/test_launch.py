"""`tfdist launch`: the main's exit codes, prefixes and errors (the launching is tfdist.launch's)."""

import sys

import helpers

PY = sys.executable


class TestCli:

  def test_exit_code_and_prefixes(self):
    result = helpers.run(helpers.tfdist_cli(
        "launch", "--workers=2", "--", PY, "-c", "import sys; print('hi'); sys.exit(0)"),
        timeout=60)
    assert result.returncode == 0
    assert "[worker:0] hi" in result.stdout and "[worker:1] hi" in result.stdout

  def test_crash_at_import_is_the_exit_code(self):
    result = helpers.run(helpers.tfdist_cli(
        "launch", "--workers=2", "--", PY, "-c", "import no_such_module_xyz"), timeout=60)
    assert result.returncode == 1
    assert "ModuleNotFoundError: No module named 'no_such_module_xyz'" in result.stdout

  def test_command_not_found(self):
    result = helpers.run(helpers.tfdist_cli("launch", "--", "no-such-program-xyz"), timeout=60)
    assert result.returncode == 127
    assert "Could not start task worker:0" in result.stdout

  def test_two_engines_are_refused_naming_both(self):
    # Before: --slurm won and --ray was ignored without a word.
    for flags, named in ((["--slurm", "--ray=127.0.0.1:1"], "--slurm and --ray"),
                         (["--ray", "--kubernetes=jobset"], "--ray and --kubernetes")):
      result = helpers.run(helpers.tfdist_cli("launch", *flags, "--", "true"), timeout=60)
      assert result.returncode == 2, result.stdout
      assert f"{named} each choose where the job runs: give one of them" in result.stdout

  def test_no_command(self):
    result = helpers.run(helpers.tfdist_cli("launch", "--workers=2"), timeout=60)
    assert result.returncode == 2
    assert "give the command after '--'" in result.stdout


def test_a_task_aborted_under_profile_is_told_what_tensorflows_profiler_does(tmp_path):
  # TF 2.21's profiler can abort a multi-worker task when it collects the trace (a native
  # crash, hit at random): an abort stands in for it, the launch names the known cause.
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--workers=1", "--profile=1-2", f"--profile_dir={tmp_path / 'profile'}", "--",
      *helpers.python("-c", "import os; os.abort()")), timeout=120, cwd=str(tmp_path))
  assert result.returncode == 134, result.stdout[-3000:]
  assert ("[tfdist launch] a task ended with SIGABRT or SIGSEGV in a job traced with --profile: "
          "TensorFlow 2.21's profiler can corrupt") in result.stdout, result.stdout[-3000:]
  assert result.stdout.rstrip().endswith("Received: exit code 134"), result.stdout[-3000:]
  plain = helpers.run(helpers.tfdist_cli(
      "launch", "--workers=1", "--", *helpers.python("-c", "import os; os.abort()")), timeout=120,
      cwd=str(tmp_path))
  assert plain.returncode == 134
  assert "profiler" not in plain.stdout  # Only a traced job is told of it.


def test_a_bad_profile_range_or_stall_timeout_is_a_one_line_error():
  result = helpers.run(helpers.tfdist_cli("launch", "--profile=5-2", "--", "true"), timeout=60)
  assert result.returncode == 2
  assert result.stdout.strip().splitlines()[-1] == (
      "tfdist launch: `profile` must be the steps to trace as FIRST-LAST, e.g. 100-120 (steps "
      "count from 1). Received: '5-2'")
  result = helpers.run(helpers.tfdist_cli("launch", "--", "true"), timeout=60,
                       env={"TFDIST_STALL_TIMEOUT": "soon"})
  assert result.returncode == 2
  assert result.stdout.strip().splitlines()[-1].startswith(
      "tfdist launch: `TFDIST_STALL_TIMEOUT` must be a number of seconds >= 0 (0: no watchdog). "
      "Received: TFDIST_STALL_TIMEOUT='soon'")
