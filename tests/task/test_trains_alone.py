"""tfdist.task._trains_alone: a task that would train alone under a multi-worker TF_CONFIG is told so."""

import json
import os

import pytest
import tensorflow as tf

import helpers
from tfdist import cluster as cluster_lib
from tfdist import launch as launch_lib
from tfdist.launch import _local as local
from tfdist.task import _trains_alone as trains_alone

# Version-sensitive: `make test-versions` runs it on the oldest and newest supported TensorFlow too.
pytestmark = pytest.mark.versions

SCRIPT = f"{helpers.SCRIPTS}/user/trains_alone.py"


def _tf_config(task_type="worker", index=1, **cluster):
  cluster = cluster or {"worker": ["localhost:1", "localhost:2"]}
  return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


@pytest.fixture
def multi_worker_task(monkeypatch):
  monkeypatch.setenv("TF_CONFIG", _tf_config())
  monkeypatch.setattr(trains_alone, "_told", [])


def test_only_chiefs_and_workers_of_a_collective_cluster_can_train_alone():
  assert trains_alone.cluster_task({"TF_CONFIG": _tf_config()}) == ("worker:1", 2)
  assert trains_alone.cluster_task({"TF_CONFIG": _tf_config("chief", 0, chief=["a:1"],
                                                            worker=["b:1"])}) == ("chief:0", 2)
  assert trains_alone.cluster_task({}) is None
  assert trains_alone.cluster_task({"TF_CONFIG": _tf_config(worker=["a:1"])}) is None
  # Under parameter servers workers serve, and an evaluator is alone by design.
  assert trains_alone.cluster_task({"TF_CONFIG": _tf_config(worker=["a:1", "b:1"],
                                                            ps=["c:1"])}) is None
  assert trains_alone.cluster_task({"TF_CONFIG": _tf_config("evaluator", 0)}) is None
  # Under tfdist launch --slurm, `tfdist task` gives each task its TF_CONFIG: a SLURM step
  # without one is that wrapper or a tf.data service's workers, no training task.
  step = {"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1", "SLURM_STEP_NODELIST": "n[1-2]"}
  assert trains_alone.cluster_task(step) is None


def test_a_local_strategy_is_named_once_with_the_fix(multi_worker_task, caplog):
  trains_alone.on_strategy(tf.distribute.OneDeviceStrategy("/cpu:0"))
  trains_alone.on_strategy(tf.distribute.OneDeviceStrategy("/cpu:0"))
  lines = [r.getMessage() for r in caplog.records if "trains alone" in r.getMessage()]
  assert len(lines) == 1, lines
  assert lines[0].startswith("This task (worker:1) trains alone: OneDeviceStrategy reads no "
                             "TF_CONFIG"), lines
  assert "tf.distribute.MultiWorkerMirroredStrategy()" in lines[0]
  assert lines[0].endswith("Received: OneDeviceStrategy()")


def test_error_mode_stops_the_task(multi_worker_task, monkeypatch):
  monkeypatch.setenv(trains_alone.TRAINS_ALONE_ENV, "error")
  with pytest.raises(RuntimeError, match=r"This task \(worker:1\) trains alone: MirroredStrategy "
                                         r".*Received: MirroredStrategy\(\)"):
    trains_alone.on_strategy(tf.distribute.MirroredStrategy(["/cpu:0"]))


def test_bad_mode_names_the_variable_and_the_value(tmp_path):
  with pytest.raises(ValueError, match=r"`TFDIST_TRAINS_ALONE` must be one of \['warn', 'error'\]"
                                       r"\. Received: TFDIST_TRAINS_ALONE='loud'"):
    local.launch_local(["true"], cluster_lib.ClusterSpec.local(2), launch_lib.LaunchOptions(
        env={**os.environ, trains_alone.TRAINS_ALONE_ENV: "loud"}))
  with pytest.raises(ValueError, match=r"`trains_alone` must be one of \['warn', 'error'\] "
                                       r"\(or None\)\. Received: trains_alone='loud'"):
    launch_lib.LaunchOptions(trains_alone="loud")


def test_the_job_note_needs_two_tasks_that_joined(tmp_path):
  assert trains_alone.job_note(str(tmp_path)) is None  # Nothing imported TensorFlow.
  for name in ("worker-0.tensorflow", "worker-1.tensorflow", "worker-0.joined"):
    (tmp_path / name).touch()
  note = trains_alone.job_note(str(tmp_path))
  assert note.startswith("No two tasks ever joined a collective") and "only worker:0 did" in note
  (tmp_path / "worker-1.joined").touch()
  assert trains_alone.job_note(str(tmp_path)) is None


def test_records_carried_from_another_node_are_records_only(tmp_path):
  # A Ray task's actor hands its node's records back; the launcher writes only record names.
  node, launcher = tmp_path / "node", tmp_path / "launcher"
  node.mkdir()
  launcher.mkdir()
  for name in ("worker-0.joined", "worker-1.tensorflow", "notes.txt"):
    (node / name).touch()
  assert trains_alone.records(str(node)) == ["worker-0.joined", "worker-1.tensorflow"]
  trains_alone.add_records(str(launcher), trains_alone.records(str(node)) + [
      "../escaped.joined", "/tmp/x.joined", "worker-0.joined/..", None])
  assert sorted(os.listdir(launcher)) == ["worker-0.joined", "worker-1.tensorflow"]
  assert not (tmp_path / "escaped.joined").exists()
  assert trains_alone.job_note(str(launcher)).endswith("Received: 1 of the tasks joined")


@pytest.mark.slow
def test_mirrored_strategy_and_no_strategy_are_told_and_the_launcher_says_none_joined():
  result = helpers.run(helpers.tfdist_cli("launch", "--workers=2", "--keras=keras3",
                                          "--timeout=240", "--", *helpers.python(SCRIPT)),
                       timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]  # Warn: the default.
  out = result.stdout
  assert "[worker:0] This task (worker:0) trains alone: MirroredStrategy reads no TF_CONFIG" in out
  assert "[worker:1] This task (worker:1) trains alone: fit runs with no strategy" in out
  assert out.count("trains alone:") == 2, out[-3000:]  # One line per task.
  assert "[tfdist launch] No two tasks ever joined a collective" in out, out[-3000:]


@pytest.mark.slow
def test_error_mode_fails_a_job_in_which_no_two_tasks_joined():
  result = helpers.run(helpers.tfdist_cli("launch", "--workers=2", "--trains_alone=error",
                                          "--timeout=120", "--",
                                          *helpers.python("-c", "import tensorflow")),
                       timeout=180)
  assert result.returncode == trains_alone.TRAINS_ALONE_EXIT_CODE, result.stdout[-3000:]
  assert "[tfdist launch] No two tasks ever joined a collective" in result.stdout


def test_a_task_whose_strategy_watch_is_off_leaves_nothing_to_raise_a_false_alarm(
    multi_worker_task, monkeypatch, tmp_path, caplog):
  # Before: on a TensorFlow the watch is not applied to, every task still recorded that it
  # imported TensorFlow, none could record joining, and a correct 2-worker job ended with
  # "No two tasks ever joined a collective" (exit 1 with --trains_alone=error).
  import dataclasses
  import sys
  from tfdist.internals import strategy_watch
  for name, gate in strategy_watch.GATES.items():  # As on a version they were not run with.
    monkeypatch.setitem(strategy_watch.GATES, name, dataclasses.replace(gate, tested=((9, 0),
                                                                                      (9, 0))))
  # install() waits for Keras's imports with finders of its own: none may outlive the test.
  monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
  monkeypatch.setenv(trains_alone.JOINED_DIR_ENV, str(tmp_path))
  trains_alone.install()  # TensorFlow is imported: its hook runs at once.
  import tf_keras  # pylint: disable=unused-import  And so do the fit watch's, for tf_keras.
  assert os.listdir(tmp_path) == []
  assert trains_alone.job_note(str(tmp_path)) is None
  assert "strategy watch (tensorflow/tensorflow#39753) is tested with TensorFlow" in caplog.text
  # Nothing was patched: a patch left here would change every later test of this process.
  assert not strategy_watch._strategy_originals and not strategy_watch._fit_originals
