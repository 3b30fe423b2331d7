"""tfdist.progress: a task's steps in its progress file, its stacks on SIGUSR1, the profile's steps."""

import json
import logging
import os
import subprocess
import sys

import pytest

from tfdist import progress


def test_the_steps_reach_the_file_the_launcher_reads_and_stacks_come_on_sigusr1(tmp_path):
  code = (
      "import os, signal, time\n"
      "from tfdist import progress\n"
      "directory = os.environ['TFDIST_PROGRESS_DIR']\n"
      "assert progress.install_from_env() and 'TFDIST_PROGRESS_DIR' not in os.environ\n"
      "for _ in range(3): time.sleep(0.01); progress.step_done()\n"
      "print(open(os.path.join(directory, 'worker-1.progress')).read())\n"
      "os.kill(os.getpid(), signal.SIGUSR1)\n"
      "time.sleep(0.2)\n")
  env = dict(os.environ, TFDIST_PROGRESS_DIR=str(tmp_path),
             TF_CONFIG=json.dumps({"task": {"type": "worker", "index": 1}}))
  result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)
  assert result.returncode == 0, result.stderr
  pid, steps, events, phase, mean = result.stdout.split()
  assert (int(steps), int(events), phase) == (3, 4, progress.STEP) and float(mean) > 0
  stacks = (tmp_path / "worker-1.stacks").read_text()
  assert 'File "<string>", line 7 in <module>' in stacks
  assert "end" in (tmp_path / "worker-1.progress").read_text()  # Its exit: training is over.


def test_outside_a_launch_step_done_only_counts():
  before = progress.steps_done()
  progress.step_done(2)
  assert progress.steps_done() == before + 2
  assert not progress.install_from_env({})


def test_profile_steps_are_first_to_last_and_a_bad_range_names_the_form():
  assert progress.parse_steps("100-120") == (100, 120)
  assert progress.parse_steps("7") == (7, 7)
  for bad in ("0-3", "5-2", "a-b", ""):
    with pytest.raises(ValueError, match=r"`profile` must be the steps to trace as FIRST-LAST, "
                       r"e.g. 100-120 \(steps count from 1\). Received: "):
      progress.parse_steps(bad)


def test_the_input_stamp_keeps_every_element_replays_and_times_the_input_wait(tmp_path):
  code = (
      "import json, os, time\n"
      "import tensorflow as tf\n"
      "from tfdist import progress\n"
      "from tfdist.data import replay\n"
      "outside = tf.data.Dataset.range(2)\n"
      "assert progress.stamped_input(outside) is outside  # Outside a launch: as it is.\n"
      "env = {'TF_CONFIG': json.dumps({'task': {'type': 'worker', 'index': 1}}),\n"
      "       'TFDIST_PROGRESS_DIR': os.environ['DIR'], 'TFDIST_INPUT_WAIT': '0'}\n"
      "assert progress.install_from_env(env)\n"
      "assert progress.stamped_input(outside) is outside  # TFDIST_INPUT_WAIT=0: as it is.\n"
      "env['TFDIST_INPUT_WAIT'] = '1'\n"
      "assert progress.install_from_env(env)\n"
      "pairs = tf.data.Dataset.from_tensor_slices(([1., 2.], [3., 4.]))\n"
      "ones = tf.data.Dataset.from_tensor_slices(([5.],)).map(lambda x: (x,))\n"
      "dicts = tf.data.Dataset.from_tensor_slices({'a': [6.]})\n"
      "for d in (pairs, ones, dicts):\n"
      "  s = progress.stamped_input(d)\n"
      "  assert s.element_spec == d.element_spec and list(s) == list(d), (list(s), list(d))\n"
      "  assert replay.not_replayable(s) == []\n"
      "slow = tf.data.Dataset.range(8).map(\n"
      "    lambda x: tf.py_function(lambda v: time.sleep(0.02) or v, [x], tf.int64))\n"
      "progress.boundary()\n"
      "for _ in progress.stamped_input(slow):\n"
      "  progress.step_done()\n"
      "progress.training_end()\n"
      "row = open(os.path.join(os.environ['DIR'], 'worker-1.steps')).read()\n"
      "traced = dict(env, TFDIST_PROFILE='3-5', TFDIST_PROFILE_DIR=os.environ['DIR'])\n"
      "assert progress.install_from_env(traced)\n"
      "assert progress.stamped_input(pairs) is pairs  # Traced: TF's profiler aborts beside it.\n"
      "print(row)\n")
  result = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, DIR=str(tmp_path)),
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stderr[-3000:]
  row = json.loads(result.stdout.splitlines()[-1])
  # 8 steps, 7 timed (the first follows a boundary), each waiting for its element.
  assert row["task"] == "worker:1" and row["steps"] == 8, row
  assert row["input_median"] > 0 and 0 < row["input_share"] <= 1, row


def test_a_parameter_server_strategys_input_gets_no_stamp():
  import tensorflow as tf
  dataset = tf.data.Dataset.range(2)
  assert progress._stampable(dataset, tf.distribute.get_strategy())
  assert not progress._stampable([1, 2], None)
  # Keras sends its dataset's graph to the workers, where no numpy function of this process runs.
  # (An uninitialized one: a connected strategy takes a cluster and tens of seconds here.)
  for strategy_class in (tf.distribute.ParameterServerStrategy,
                         tf.distribute.experimental.ParameterServerStrategy):
    assert not progress._stampable(dataset, strategy_class.__new__(strategy_class))


def test_a_summary_that_fails_warns_and_training_goes_on(tmp_path, monkeypatch):
  def broken(rows):
    raise RuntimeError("no summary")

  monkeypatch.setattr(progress._reporter, "chief", True)
  monkeypatch.setattr(progress._reporter, "stem", str(tmp_path / "worker-0"))
  monkeypatch.setattr(progress.step_times, "straggler", broken)
  records = []
  handler = logging.Handler()
  handler.emit = records.append
  logging.getLogger("tfdist").addHandler(handler)
  try:
    progress.epoch_end()
  finally:
    logging.getLogger("tfdist").removeHandler(handler)
  assert [r.getMessage() for r in records] == [
      "tfdist: the step times of this epoch were not summarized: RuntimeError('no summary')"]


def test_the_chief_names_a_straggler_whose_row_is_in_the_shared_folder(tmp_path):
  # Under `tfdist task` on SLURM each task has a progress directory of its own; the
  # wrappers copy their rows to the job's records folder, where the chief reads them.
  from tfdist import _step_times as step_times
  own, shared = tmp_path / "own", tmp_path / "shared"
  own.mkdir()
  shared.mkdir()
  (shared / "worker-1.steps").write_text(step_times.to_text(
      step_times.summarize("worker:1", 20, [0.2] * 20, [0.18] * 20)))
  (shared / "worker-0.steps").write_text(step_times.to_text(  # Older: its own dir has it.
      step_times.summarize("worker:0", 1, [9.0], [9.0])))
  code = (
      "import time\n"
      "from tfdist import progress\n"
      "assert progress.install_from_env()\n"
      "progress.boundary()\n"
      "for _ in range(20): time.sleep(0.05); progress.step_done()\n"
      "progress.epoch_end()\n")
  env = dict(os.environ, TFDIST_PROGRESS_DIR=str(own), TFDIST_STEPS_SHARED_DIR=str(shared),
             TF_CONFIG=json.dumps({"cluster": {"worker": ["a:1", "b:2"]},
                                   "task": {"type": "worker", "index": 0}}))
  result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)
  assert result.returncode == 0, result.stderr
  assert "worker:1 is markedly slower than the other tasks (200.0 ms a step against " \
      in result.stdout + result.stderr, \
      result.stdout + result.stderr


def test_the_chief_reads_the_published_rows_of_the_other_stepping_tasks_only():
  cluster = {"chief": ["c:1"], "worker": ["w:1", "w:2"], "evaluator": ["e:1"]}
  assert progress._peers({"cluster": cluster}, "chief:0") == ("worker:0", "worker:1")
  assert progress._peers({"cluster": cluster}, "worker:1") == ("chief:0", "worker:0")
  # Under parameter servers only the chief steps; a cluster TF would refuse has none.
  assert progress._peers({"cluster": {**cluster, "ps": ["p:1"]}}, "chief:0") == ()
  assert progress._peers({"cluster": {"worker": {"x": "w:1"}}}, "chief:0") == ()
  # A sparse cluster (TF_CONFIG's task-index dict) names its tasks by index.
  assert progress._peers({"cluster": {"worker": {"0": "w:1", "3": "w:4"}}}, "worker:0") == (
      "worker:3",)


@pytest.mark.parametrize("published, cluster, expected", [
    ("1", {"worker": ["a:1", "b:2"]}, True),
    ("0", {"worker": ["a:1", "b:2"]}, False),  # The user turned it off.
    (None, {"worker": ["a:1", "b:2"]}, False),  # A local launch: one folder holds every row.
    ("1", {"chief": ["c:1"], "worker": ["a:1"], "ps": ["p:1"]}, False),  # Only the chief steps.
])
def test_a_task_publishes_its_row_only_where_asked_and_where_others_step(
    monkeypatch, published, cluster, expected):
  for name in ("publishing", "peers", "shared", "stamping", "profile"):
    monkeypatch.setattr(progress._reporter, name, getattr(progress._reporter, name))
  environ = {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})}
  if published is not None:
    environ[progress.STEPS_PUBLISHED_ENV] = published
  progress.install_from_env(environ)  # No progress directory: nothing is installed.
  assert progress._reporter.publishing is expected
