"""tfdist task: a command run as this pod's task, with the TF_CONFIG its environment gives."""

import json
import os
import sys

import pytest

import helpers

PRINT_TF_CONFIG = [sys.executable, "-c", "import os; print('TF_CONFIG', os.environ['TF_CONFIG'])"]
POD = {"TFDIST_CLUSTER_SHAPE": "worker=2", "JOBSET_NAME": "digits",
       "JOBSET_REPLICATED_JOB": "worker", "JOBSET_JOB_INDEX": "0", "JOB_COMPLETION_INDEX": "1"}


def test_a_jobset_pod_runs_its_command_with_its_tf_config():
  result = helpers.run(helpers.tfdist_cli("task", "--", *PRINT_TF_CONFIG), timeout=60, env=POD)
  assert result.returncode == 0, result.stdout
  config = json.loads(result.stdout.split("TF_CONFIG ", 1)[1])
  assert config == {"cluster": {"worker": ["digits-worker-0-0.digits:2222",
                                           "digits-worker-0-1.digits:2223"]},
                    "task": {"type": "worker", "index": 1}}


def test_the_command_gets_the_task_site_first_on_its_python_path():
  from tfdist.task import _keras as task_keras
  code = "import os; print('PYTHONPATH', os.environ['PYTHONPATH'])"
  result = helpers.run(helpers.tfdist_cli("task", "--", sys.executable, "-c", code), timeout=60,
                       env=dict(POD, PYTHONPATH="/mine"))
  assert result.returncode == 0, result.stdout
  paths = result.stdout.split("PYTHONPATH ", 1)[1].split()[0].split(":")
  assert paths == [task_keras.SITE_DIR, "/mine"], paths


def test_no_cluster_a_bad_pod_and_a_missing_program_are_one_line_errors():
  result = helpers.run(helpers.tfdist_cli("task", "--", *PRINT_TF_CONFIG), timeout=60)
  assert result.returncode == 2
  assert result.stdout.strip().splitlines()[-1].startswith(
      "tfdist task: this process is no task of a cluster: no environment applies (asked, in "
      "order: ['vertex', 'tf_config', 'trainjob', 'jobset', 'kubernetes', 'slurm'])")
  result = helpers.run(helpers.tfdist_cli("task", "--", *PRINT_TF_CONFIG), timeout=60,
                       env=dict(POD, JOB_COMPLETION_INDEX="2"))
  assert result.returncode == 2
  assert result.stdout.strip().splitlines()[-1] == (
      "tfdist task: `JOB_COMPLETION_INDEX` must be below the 2 worker task(s) of "
      "`TFDIST_CLUSTER_SHAPE`. Received: 2")
  result = helpers.run(helpers.tfdist_cli("task", "--", "/nonexistent/train"), timeout=60,
                       env=POD)
  assert result.returncode == 127
  assert result.stdout.strip().splitlines()[-1] == (
      "tfdist task: could not run '/nonexistent/train': No such file or directory. Received: "
      "command=['/nonexistent/train']")


@pytest.mark.slow
def test_a_pod_whose_steps_stop_dumps_its_stacks_says_where_and_exits_3(tmp_path):
  import os
  from tfdist import launch
  # Worker 1 of the loop blocks after 3 steps in its first attempt; its pod watches it alone.
  script = os.path.join(helpers.SCRIPTS, "stall_loop.py")
  result = helpers.run(helpers.tfdist_cli("task", "--", sys.executable, script, str(tmp_path)),
                       timeout=60, env=dict(POD, TFDIST_STALL_TIMEOUT="1", TFDIST_GRACE_PERIOD="2"))
  assert result.returncode == launch.STALL_EXIT_CODE, result.stdout
  assert "tfdist task: worker:1's Python stacks:" in result.stdout
  assert "tfdist task: stalled: no training step completed anywhere for" in result.stdout
  assert "worker:1 is not waiting inside TensorFlow (a collective waits there): it is in " \
      "wait_forever (" in result.stdout, result.stdout
  assert "done" not in result.stdout.replace("steps done", "")


@pytest.mark.slow
def test_the_wrapper_of_a_multi_node_slurm_task_leaves_no_record(tmp_path):
  from tfdist.task import _keras as task_keras
  from tfdist.task import _trains_alone as trains_alone
  # A step over `n[1-2]` where no scontrol is found: the wrapper reads the host list with
  # TensorFlow, under the task site as tfdist's sbatch script runs it; only its command
  # is a task, and this one never imports TensorFlow.
  step = {"SLURM_JOB_ID": "1234", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2",
          "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
          "PATH": str(tmp_path), "PYTHONPATH": task_keras.SITE_DIR,
          trains_alone.JOINED_DIR_ENV: str(tmp_path), trains_alone.TRAINS_ALONE_ENV: "error",
          "TFDIST_STALL_TIMEOUT": "0"}  # The command replaces the wrapper: no watcher.
  result = helpers.run(helpers.tfdist_cli("task", "--", "/bin/true"), timeout=60, env=step)
  assert result.returncode == 0, result.stdout
  assert "tfdist task: worker:0 of" in result.stdout, result.stdout
  assert os.listdir(tmp_path) == []
  assert trains_alone.job_note(str(tmp_path)) is None


def test_a_command_that_fails_leaves_its_code_and_one_that_is_stopped_none(tmp_path):
  import signal
  from tfdist.launch import _first_failure as first_failure
  from tfdist.task import _trains_alone as trains_alone
  env = dict(POD, **{trains_alone.JOINED_DIR_ENV: str(tmp_path)})
  result = helpers.run(helpers.tfdist_cli("task", "--", sys.executable, "-c", "exit(5)"),
                       timeout=60, env=env)
  assert result.returncode == 5, result.stdout
  assert first_failure.first(str(tmp_path)) == ("worker:1", 5)
  # Stopped by the platform (srun's SIGTERM after a peer failed): no record, the signal's code.
  os.remove(tmp_path / "worker-1.exit")
  with helpers.spawned(helpers.tfdist_cli(
      "task", "--", sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"),
      env=env) as process:
    for line in process.stdout:  # Its task line, then the command's.
      if line.strip() == "up":
        break
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
  assert process.returncode == -signal.SIGTERM
  assert first_failure.first(str(tmp_path)) is None


def test_a_pod_publishes_its_step_times_unless_the_user_turned_that_off():
  # Pods share no folder: the rows meet in TF's coordination service (tfdist.task.progress).
  # The command runs watched (2 training tasks), as every pod of a multi-worker job does.
  # A shell, not Python: the task site takes the variables out of a Python task's environment.
  show = ["sh", "-c", "echo PUBLISHED=$TFDIST_STEPS_PUBLISHED SHARED=$TFDIST_STEPS_SHARED_DIR"]
  for given, expected in ((None, "PUBLISHED=1 SHARED=\n"), ("0", "PUBLISHED=0 SHARED=\n")):
    env = dict(POD, **({} if given is None else {"TFDIST_STEPS_PUBLISHED": given}))
    result = helpers.run(helpers.tfdist_cli("task", "--", *show), timeout=60, env=env)
    assert result.returncode == 0, result.stdout
    assert expected in result.stdout, result.stdout
