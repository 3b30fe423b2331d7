"""tfdist.task.progress: a task's steps in its progress file, its stacks on SIGUSR1, the profile's steps."""

import json
import logging
import os
import subprocess
import sys
import threading

import pytest

import helpers
from tfdist.task import progress


def test_the_steps_reach_the_file_the_launcher_reads_and_stacks_come_on_sigusr1(tmp_path):
  code = (
      "import os, signal, time\n"
      "from tfdist.task import progress\n"
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


@pytest.mark.slow
def test_the_input_stamp_keeps_every_element_replays_and_times_the_input_wait(tmp_path):
  code = (
      "import json, os, time\n"
      "import tensorflow as tf\n"
      "from tfdist.task import progress\n"
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
  monkeypatch.setattr(progress, "_naming", None)
  records = []
  handler = logging.Handler()
  handler.emit = records.append
  logging.getLogger("tfdist").addHandler(handler)
  try:
    progress.epoch_end()
    progress._named(30)
  finally:
    logging.getLogger("tfdist").removeHandler(handler)
  assert [r.getMessage() for r in records] == [
      "tfdist: the step times of this epoch were not summarized: RuntimeError('no summary')"]


def _chief_at_epoch_end(tmp_path, monkeypatch, steps, rows, later=None):
  """The lines the chief logs at an epoch's end after `steps` steps, with `rows` in its
  folder, and `later` rows written there 0.2 s after the epoch ended; how many reads."""
  from tfdist.task import _step_times as step_times

  def write(row):
    path = tmp_path / (row.task.replace(":", "-") + step_times.STEPS_SUFFIX)
    path.with_suffix(".new").write_text(step_times.to_text(row))
    os.replace(path.with_suffix(".new"), path)

  for row in rows:
    write(row)
  reads = []
  monkeypatch.setattr(progress.step_times, "read",
                      lambda directory, read=step_times.read: reads.append(1) or read(directory))
  monkeypatch.setattr(progress._reporter, "chief", True)
  monkeypatch.setattr(progress._reporter, "stem", str(tmp_path / "worker-0"))
  monkeypatch.setattr(progress._reporter, "steps", steps)
  monkeypatch.setattr(progress, "_naming", None)
  writer = threading.Timer(0.2, lambda: [write(row) for row in later or ()])
  writer.start()
  try:
    with helpers.tfdist_messages() as messages:
      progress.epoch_end()  # The chief waits for the rows beside training: it returns at once.
      progress._named(30)
  finally:
    writer.cancel()
    writer.join()
  return messages, len(reads)


def test_the_chief_waits_for_the_rows_of_the_steps_it_ran_before_naming_anyone(
    tmp_path, monkeypatch):
  from tfdist.task import _step_times as step_times
  chief = step_times.summarize("worker:0", 20, [0.05] * 20)
  # worker:1's row of a second ago: its first 8 steps, slower while warming up. Its row of
  # these 20 steps comes as its epoch ends, just after the chief's. Before, worker:1 was
  # named from the earlier row.
  early = step_times.summarize("worker:1", 8, [0.2] * 8)
  now = step_times.summarize("worker:1", 20, [0.05] * 20)
  messages, reads = _chief_at_epoch_end(tmp_path, monkeypatch, 20, [chief, early], [now])
  assert messages == [] and reads > 1
  # A task that stays behind, or is ahead (its steps wait for no one's; it ended, or
  # trains something else), ran other steps than the chief's: left out, no one named.
  messages, _ = _chief_at_epoch_end(tmp_path, monkeypatch, 20, [chief, early])
  assert messages == []
  ahead = step_times.summarize("worker:1", 46, [0.001] * 46)
  server = step_times.summarize("ps:0", 0, [])  # A parameter server never steps: no wait.
  messages, reads = _chief_at_epoch_end(tmp_path, monkeypatch, 20, [chief, ahead, server])
  assert messages == [] and reads == 1
  # Tasks at the chief's steps are compared as before: a slow one among them is named.
  slow = step_times.summarize("worker:2", 20, [0.2] * 20)
  messages, _ = _chief_at_epoch_end(tmp_path, monkeypatch, 20, [chief, ahead, slow])
  assert len(messages) == 1 and messages[0].startswith(
      "tfdist: worker:2 is markedly slower than the other tasks (200.0 ms a step against "), \
      messages


def test_the_chief_names_a_straggler_whose_row_is_in_the_shared_folder(tmp_path):
  # Under `tfdist task` on SLURM each task has a progress directory of its own; the
  # wrappers copy their rows to the job's records folder, where the chief reads them.
  from tfdist.task import _step_times as step_times
  own, shared = tmp_path / "own", tmp_path / "shared"
  own.mkdir()
  shared.mkdir()
  (shared / "worker-1.steps").write_text(step_times.to_text(
      step_times.summarize("worker:1", 20, [0.2] * 20, [0.18] * 20)))
  (shared / "worker-0.steps").write_text(step_times.to_text(  # Older: its own dir has it.
      step_times.summarize("worker:0", 1, [9.0], [9.0])))
  code = (
      "import time\n"
      "from tfdist.task import progress\n"
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


# --- The status line of a running epoch (a launched task's Keras `fit`) ---


class _Callback:
  """The little of a Keras Callback the status line uses: the `params` Keras sets."""

  def set_params(self, params):
    self.params = params


class _Clock:
  """A fake clock: each read returns `now`; counts its reads."""

  def __init__(self, now=100.0):
    self.now, self.reads = now, 0

  def __call__(self):
    self.reads += 1
    return self.now


class _Loss:
  """A loss that counts its conversions, as a tf_keras tensor would fetch its value."""

  def __init__(self, value):
    self.value, self.fetched = value, 0

  def __float__(self):
    self.fetched += 1
    return self.value


@pytest.fixture
def status(monkeypatch):
  """(a StepReporter given `params`, the fake clock, the tfdist lines logged) in task worker:1."""
  reporter = progress._Reporter()  # Counts only: no file, nothing of the other tests'.
  reporter.task, reporter.status_seconds = "worker:1", 10.0
  reporter.clock = clock = _Clock()
  monkeypatch.setattr(progress, "_reporter", reporter)

  def start(params, seconds=10.0):
    reporter.status_seconds = seconds
    callback, = progress.keras_callbacks(_Callback)
    callback.set_params(params)
    callback.on_train_begin()
    return callback

  with helpers.tfdist_messages() as lines:
    yield start, clock, lines


def _batches(callback, clock, first, last, start, seconds_a_step, logs=None):
  """Ends batches `first`..`last` (from 0) of the running epoch, from `start` on the clock."""
  for batch in range(first, last + 1):
    clock.now = start + (batch - first) * seconds_a_step
    callback.on_train_batch_end(batch, logs)


def test_the_status_line_gives_the_step_its_speed_the_loss_and_the_time_left(status, capsys):
  start, clock, lines = status
  callback = start({"verbose": 1, "epochs": 3, "steps": 256})
  loss = _Loss(0.43121)
  callback.on_epoch_begin(0)
  reads = clock.reads
  # 8 steps a second from the first step's end (t=100), which may compile: not measured.
  _batches(callback, clock, 0, 160, 100.0, 0.125, {"loss": loss})
  assert lines == [
      "tfdist: worker:1 epoch 1/3, step 81/256, 8.0 steps/s, loss 0.4312, "
      "about 22s left in this epoch",
      "tfdist: worker:1 epoch 1/3, step 161/256, 8.0 steps/s, loss 0.4312, "
      "about 12s left in this epoch"]
  assert clock.reads - reads == 161  # One clock read a batch,
  assert loss.fetched == 2  # and the loss fetched only for the lines written.
  # Keras's bar (verbose=1) draws its line in place on stdout: the status line starts its own.
  assert capsys.readouterr().out.startswith("\n")
  callback.on_epoch_end(0)
  callback.on_epoch_begin(1)  # Measured again from the new epoch's first step.
  _batches(callback, clock, 0, 40, 500.0, 0.25, {"loss": 0.0123})
  assert lines[2:] == [
      "tfdist: worker:1 epoch 2/3, step 41/256, 4.0 steps/s, loss 0.0123, "
      "about 54s left in this epoch"]


def test_an_epoch_of_unknown_length_has_its_step_and_speed_but_no_time_left(status, capsys):
  start, clock, lines = status
  callback = start({"verbose": 2, "epochs": 1, "steps": None})
  callback.on_epoch_begin(0)
  _batches(callback, clock, 0, 20, 100.0, 0.5)  # No logs: no loss.
  assert lines == ["tfdist: worker:1 epoch 1/1, step 21, 2.0 steps/s"]
  # verbose=2 draws no line in place: nothing to end before the status line.
  assert not capsys.readouterr().out.startswith("\n")


def test_slow_steps_are_seconds_a_step_and_a_long_epoch_hours_and_minutes(status):
  start, clock, lines = status
  callback = start({"verbose": 1, "epochs": 1, "steps": 300})
  callback.on_epoch_begin(0)
  _batches(callback, clock, 0, 1, 100.0, 30.0)
  assert lines == [
      "tfdist: worker:1 epoch 1/1, step 2/300, 30.0s a step, about 2 h 29 min left in this epoch"]


@pytest.mark.parametrize("params, seconds", [
    ({"verbose": 0, "epochs": 1, "steps": 100}, 10.0),  # fit(verbose=0): nothing shown.
    ({"verbose": 1, "epochs": 1, "steps": 100}, 0.0),  # TFDIST_STATUS_SECONDS=0: off.
])
def test_no_status_line_with_verbose_0_or_status_seconds_0(status, params, seconds):
  start, clock, lines = status
  callback = start(params, seconds)
  callback.on_epoch_begin(0)
  _batches(callback, clock, 0, 99, 100.0, 1.0, {"loss": 1.0})
  assert lines == [] and progress.steps_done() == 100  # Its steps still count.


def test_status_seconds_come_from_the_environment_and_a_bad_value_keeps_the_default(status):
  _, _, lines = status
  env = progress.STATUS_SECONDS_ENV
  assert progress.status_seconds({}) == progress.STATUS_SECONDS == 10.0
  assert progress.status_seconds({env: "2.5"}) == 2.5
  assert progress.status_seconds({env: "0"}) == 0.0
  for bad in ("soon", "-1", "nan"):
    assert progress.status_seconds({env: bad}) == 10.0
  assert lines[0] == ("tfdist: `TFDIST_STATUS_SECONDS` must be a number of seconds >= 0 (0: no "
                      "status lines); this task writes one every 10s. Received: "
                      "TFDIST_STATUS_SECONDS='soon'")
  assert len(lines) == 3
