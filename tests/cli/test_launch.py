"""`tfdist launch`: the main's exit codes, prefixes and errors (the launching is tfdist.launch's)."""

import sys

import pytest
import yaml

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


def _training_containers(node):
  """Every container (or TrainJob trainer) in a manifest that runs `tfdist task`: its env."""
  if isinstance(node, dict):
    command = node.get("command") or []
    if "tfdist" in command and "task" in command and "env" in node:
      yield {e["name"]: e.get("value") for e in node["env"]}
    for value in node.values():
      yield from _training_containers(value)
  elif isinstance(node, list):
    for value in node:
      yield from _training_containers(value)


@pytest.mark.parametrize("kind", ["indexed", "tfjob", "jobset", "trainjob"])
def test_the_watch_and_profile_flags_reach_every_pod_of_every_kind(kind):
  # Before: --stall_timeout, --trains_alone and --profile were dropped from manifests without
  # a word, and --profile's summary line was printed into the YAML.
  result = helpers.run(helpers.tfdist_cli(
      "launch", f"--kubernetes={kind}", "--image=img:1", "--workers=2", "--stall_timeout=45",
      "--trains_alone=error", "--profile=3-5", "--profile_dir=traces", "--",
      "python", "train.py"), timeout=60, env={"TFDIST_STALL_TIMEOUT": "999"})
  assert result.returncode == 0, result.stdout
  docs = list(yaml.safe_load_all(result.stdout))  # Nothing but manifests on stdout.
  containers = list(_training_containers(docs))
  assert containers, result.stdout
  for env in containers:
    assert {k: env.get(k) for k in ("TFDIST_STALL_TIMEOUT", "TFDIST_TRAINS_ALONE",
                                    "TFDIST_PROFILE", "TFDIST_PROFILE_DIR")} == {
        "TFDIST_STALL_TIMEOUT": "45", "TFDIST_TRAINS_ALONE": "error",
        "TFDIST_PROFILE": "3-5", "TFDIST_PROFILE_DIR": "traces"}, env
  plain = helpers.run(helpers.tfdist_cli(
      "launch", f"--kubernetes={kind}", "--image=img:1", "--workers=2", "--", "python",
      "train.py"), timeout=60, env={"TFDIST_STALL_TIMEOUT": "999"})
  assert "TFDIST_STALL_TIMEOUT" not in plain.stdout  # This machine's environment stays out.


def test_without_tf_keras_a_local_launch_that_chooses_it_is_refused_before_any_task_starts(
    tmp_path):
  # Keras 3 alone. Before: each task started with TF_USE_LEGACY_KERAS=1 and failed inside
  # TensorFlow at its first `tf.keras`, once per task and after the cluster formed.
  env = helpers.without_tf_keras()
  started = tmp_path / "started"
  command = ["--", "touch", str(started)]
  for flags, extra_env, what in [(["--keras=tf_keras"], {}, "--keras=tf_keras"),
                                 ([], {"TF_USE_LEGACY_KERAS": "1"}, "TF_USE_LEGACY_KERAS=1"),
                                 ([], {"TF_USE_LEGACY_KERAS": "true"}, "TF_USE_LEGACY_KERAS=true")]:
    refused = helpers.run(helpers.tfdist_cli("launch", "--workers=2", *flags, *command),
                          timeout=60, env={**env, **extra_env})
    assert refused.returncode == 2, refused.stdout[-3000:]
    assert refused.stdout.strip().splitlines()[-1].startswith(
        f"tfdist launch: {what} needs tf_keras, which is not installed. Install the one of "
        "your TensorFlow's minor version: pip install 'tf-keras=="), refused.stdout
    assert "or use Keras 3 (`import keras`; `--keras=keras3`)" in refused.stdout
    assert not started.exists()
  # Keras 3 by default there; and a manifest's image is not this machine: not refused.
  launched = helpers.run(helpers.tfdist_cli("launch", "--workers=2", *command), timeout=60,
                         env=env)
  assert launched.returncode == 0 and started.exists(), launched.stdout[-3000:]
  printed = helpers.run(helpers.tfdist_cli("launch", "--workers=2", "--keras=tf_keras",
                                           "--kubernetes=jobset", "--image=example/train:1",
                                           "--", "python", "train.py"), timeout=60, env=env)
  assert printed.returncode == 0, printed.stdout[-3000:]
  assert "name: TF_USE_LEGACY_KERAS" in printed.stdout
