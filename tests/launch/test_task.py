"""tfdist.launch._task: the wrapper that runs a command as this task (`tfdist task`, Ray nodes)."""

import io
import json
import sys

import pytest

import helpers
from tfdist.launch import _task as task
from tfdist.task import _trains_alone as trains_alone

POD = {"TFDIST_CLUSTER_SHAPE": "worker=2", "JOBSET_NAME": "digits",
       "JOBSET_REPLICATED_JOB": "worker", "JOBSET_JOB_INDEX": "0", "JOB_COMPLETION_INDEX": "1"}


@pytest.fixture(autouse=True)
def _still_a_task(monkeypatch):
  # The wrapper marks its process as no task; the test process stays one for other tests.
  monkeypatch.setattr(trains_alone, "_not_a_task", [])


def _refused(command, environ):
  out, err = io.StringIO(), io.StringIO()
  code = task.run(command, environ, out, err)
  return code, err.getvalue(), out.getvalue()


def test_what_it_cannot_run_is_one_line_with_exit_2_and_nothing_started():
  code, err, out = _refused([], POD)
  assert (code, out) == (2, "")
  assert err == ("tfdist task: give the command after '--', e.g. `tfdist task -- python "
                 "train.py`. Received: no command\n")
  code, err, _ = _refused(["true"], {})
  assert code == 2 and err.startswith("tfdist task: this process is no task of a cluster")
  assert err.endswith("Received: no environment\n")
  code, err, _ = _refused(["true"], dict(POD, JOB_COMPLETION_INDEX="2"))
  assert code == 2 and err.endswith("Received: 2\n"), err
  code, err, _ = _refused(["true"], dict(POD, TFDIST_STALL_TIMEOUT="soon"))
  assert code == 2 and "Received: TFDIST_STALL_TIMEOUT='soon'" in err, err


def test_as_a_module_it_runs_the_command_with_the_tasks_tf_config():
  # What tfdist.launch.ray._launcher starts on a node: a library module, not the `tfdist` command.
  code = "import os; print('TF_CONFIG', os.environ['TF_CONFIG'])"
  result = helpers.run(helpers.python("-m", "tfdist.launch._task", "--", sys.executable, "-c",
                                      code), timeout=60, env=POD)
  assert result.returncode == 0, result.stdout
  assert result.stdout.splitlines()[0].startswith("tfdist task: worker:1 of ClusterSpec(")
  assert json.loads(result.stdout.split("TF_CONFIG ", 1)[1])["task"] == {"type": "worker",
                                                                         "index": 1}
