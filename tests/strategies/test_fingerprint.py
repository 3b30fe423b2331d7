"""tfdist.strategies._fingerprint: workers that differ are refused, naming what; the check never hangs."""

import json
import os
import re

import pytest

import helpers
from tfdist.task import progress
from tfdist.strategies import _fingerprint as fingerprint


def test_the_fingerprint_names_what_every_worker_must_share():
  fields = fingerprint.fingerprint()
  assert set(fields) == {"tfdist", "tensorflow", "keras", "keras in use", "python", "devices",
                         "cluster spec"}
  assert "CPU" in fields["devices"]


def test_with_a_strategy_the_fingerprint_has_its_kind_and_its_replicas_here():
  import tensorflow as tf
  fields = fingerprint.fingerprint(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
  assert fields["strategy"] == "MirroredStrategy"
  assert fields["replicas on this worker"] == "2"


class _Store:
  """The coordination service's store as the checker sees it: keys set once, reads that time out.

  `clock` moves by each read's timeout, as a real read that finds nothing would take it.
  """

  def __init__(self, clock, values=None):
    self.values, self.clock, self.aborted = dict(values or {}), clock, []

  def insert(self, key, value):
    return self.values.setdefault(key, value) == value

  def wait_for_key(self, key, timeout_ms):
    if key not in self.values:
      self.clock[0] += timeout_ms / 1000
    return self.values.get(key)

  def abort(self, message):
    self.aborted.append(message)


def _checker(values=None, timeout=30.0, me="worker:1"):
  clock = [0.0]
  store = _Store(clock, values)
  checker = fingerprint._Checker(None, timeout=timeout, store=store, clock=lambda: clock[0],
                                 me=me, tasks=["worker:0", "worker:1"])
  checker.start_watching = lambda: None  # The watcher's own test starts it.
  return checker, store


def _key(task, what, check=None):
  return fingerprint.KEY.format(check=check, task=task, what=what)


def test_a_variable_whose_shape_differs_names_it_each_sides_value_and_the_task():
  checker, store = _checker()
  store.values[_key("worker:0", 3, checker.check)] = json.dumps(
      {"name": "dense/kernel", "value": "(4, 32) float32"})
  with pytest.raises(ValueError, match=re.escape(
      "Workers disagree before their first collective: variable 3, dense/kernel: (4, 32) "
      "float32 on worker:0, (4, 64) float32 on worker:1. Every worker") + r".*Received: 2 tasks"):
    checker.compare("variable 3, dense/kernel", {"name": "dense/kernel",
                                                 "value": "(4, 64) float32"}, 3)
  # The other tasks learn it from the store.
  assert "variable 3" in store.values[fingerprint.ERROR_KEY.format(check=checker.check)]


def test_another_variable_at_the_same_place_names_both():
  checker, store = _checker()
  store.values[_key("worker:0", 6, checker.check)] = json.dumps(
      {"name": "out/bias", "value": "(1,) float32"})
  with pytest.raises(ValueError, match=re.escape(
      "variable 6: out/bias (1,) float32 on worker:0, iteration () int64 on worker:1.")):
    checker.compare("variable 6, iteration", {"name": "iteration", "value": "() int64"}, 6)


def _built(fits):
  return fingerprint.BUILT.format(fits=fits)


def test_a_variable_the_other_task_never_makes_is_only_here_once_it_began_training():
  checker, store = _checker()
  store.values[_key("worker:0", _built(1), checker.check)] = "12"
  with pytest.raises(ValueError, match=re.escape(
      "variable 12, extra: only on worker:1; worker:0 made 12 variables under this strategy "
      "and began training.") + r".*Received: 12 variables on worker:0, more on worker:1"):
    checker.compare("variable 12, extra", {"name": "extra", "value": "() float32"}, 12)
  # A task that began training with more variables is no such case: it is still to come.
  checker, store = _checker()
  store.values[_key("worker:0", _built(1), checker.check)] = "13"
  with pytest.raises(ValueError, match=r"did not reach it within 30s"):
    checker.compare("variable 12, extra", {"name": "extra", "value": "() float32"}, 12)


def test_a_fit_both_tasks_began_says_nothing_of_the_variables_made_after_it():
  # Both trained together, then each builds another model: the peer is slower, not short.
  checker, store = _checker()
  store.values[_key("worker:0", _built(1), checker.check)] = "6"
  checker.fits = 1
  with pytest.raises(ValueError, match=r"did not reach it within 30s"):
    checker.compare("variable 6, dense/kernel", {"name": "dense/kernel", "value": "(4, 1)"}, 6)
  # Its second fit, which this task has not begun, does.
  checker, store = _checker()
  checker.fits = 1
  store.values[_key("worker:0", _built(1), checker.check)] = "6"
  store.values[_key("worker:0", _built(2), checker.check)] = "6"
  with pytest.raises(ValueError, match=r"only on worker:1"):
    checker.compare("variable 6, dense/kernel", {"name": "dense/kernel", "value": "(4, 1)"}, 6)


@pytest.mark.parametrize("count", [0, 1, 3])
def test_a_task_that_never_reaches_the_check_fails_it_in_bounded_time_naming_the_task(count):
  # Whatever was checked before: nothing, the fingerprint, or some variables.
  checker, store = _checker(timeout=20)
  for index in range(count):
    store.values[_key("worker:0", index, checker.check)] = json.dumps({"name": "v", "value": "x"})
    checker.compare(f"variable {index}, v", {"name": "v", "value": "x"}, index)
  with pytest.raises(ValueError, match=re.escape(
      f"Workers did not meet at variable {count}, v: worker:0 did not reach it within 20s "
      "(worker:1 did).") + r".*Received: timeout=20s"):
    checker.compare(f"variable {count}, v", {"name": "v", "value": "x"}, count)
  assert store.clock[0] <= 20 + 1  # Its deadline, give or take one read.


def test_a_difference_another_task_found_raises_here_with_its_words(monkeypatch):
  checker, store = _checker()
  monkeypatch.setattr(fingerprint, "WATCH_MS", 10)
  checker.start_watching = lambda: fingerprint._Checker.start_watching(checker)
  # Control characters in another task's words are not passed on as they are.
  store.values[fingerprint.ERROR_KEY.format(check=checker.check)] = "Workers disagree:\x1b[2J X"
  with pytest.raises(ValueError, match=r"^Workers disagree: \[2J X$"):
    checker.compare("fingerprint", {"tensorflow": "2.21.0"})
  checker.watcher.join(timeout=10)
  assert store.aborted == []  # This task raised it itself: no collective to end.


def test_a_built_count_that_is_no_count_says_nothing():
  checker, store = _checker()
  store.values[_key("worker:0", _built(1), checker.check)] = "forged"
  with pytest.raises(ValueError, match=r"did not reach it within 30s"):
    checker.compare("variable 0, v", {"name": "v", "value": "x"}, 0)


def test_a_fingerprint_that_differs_names_each_field_and_tasks_in_the_groups_order():
  checker, store = _checker(me="worker:0")
  store.values[_key("worker:1", fingerprint.FINGERPRINT, checker.check)] = json.dumps(
      {"keras in use": "keras3", "replicas on this worker": "1", "python": "3.11.2"})
  with pytest.raises(ValueError, match=re.escape(
      "fingerprint: keras in use: tf_keras on worker:0, keras3 on worker:1; replicas on this "
      "worker: 2 on worker:0, 1 on worker:1.")):
    checker.compare("fingerprint", {"keras in use": "tf_keras", "replicas on this worker": "2",
                                    "python": "3.11.2"})


def test_a_forged_record_reads_as_text_and_differs():
  checker, store = _checker()
  store.values[_key("worker:0", fingerprint.FINGERPRINT, checker.check)] = "[1, 2]"
  with pytest.raises(ValueError, match=r"record: \[1, 2\] on worker:0, nothing on worker:1"):
    checker.compare("fingerprint", {"python": "3.11.2"})


def test_the_watcher_fails_this_tasks_collectives_with_the_jobs_error(monkeypatch):
  checker, store = _checker()
  monkeypatch.setattr(fingerprint, "POLL_MS", 10)
  store.values[fingerprint.ERROR_KEY.format(check=checker.check)] = "Workers disagree: Y"
  fingerprint._Checker.start_watching(checker)
  checker.watcher.join(timeout=10)
  assert not checker.watcher.is_alive()
  assert store.aborted == ["Workers disagree: Y"]


def test_a_task_that_found_the_error_itself_aborts_nothing(monkeypatch):
  checker, store = _checker()
  monkeypatch.setattr(fingerprint, "POLL_MS", 10)
  checker.failed = True
  store.values[fingerprint.ERROR_KEY.format(check=checker.check)] = "Workers disagree: Y"
  fingerprint._Checker.start_watching(checker)
  checker.watcher.join(timeout=10)
  assert not checker.watcher.is_alive() and store.aborted == []


def test_training_begins_says_how_many_variables_each_strategy_made():
  checker, store = _checker()
  checker.count = 7
  fingerprint._checkers.add(checker)
  added = fingerprint.all_built not in progress._training_begins
  try:
    progress.when_training_begins(fingerprint.all_built)
    progress.training_begins()
  finally:
    fingerprint._checkers.discard(checker)
    if added:
      progress._training_begins.remove(fingerprint.all_built)
  assert store.values[_key("worker:1", _built(1), checker.check)] == "7"
  assert checker.fits == 1


def _launch(mode, *flags, timeout=120):
  return helpers.run(helpers.tfdist_cli(
      "launch", "--workers=2", "--grace_period=2", *flags, "--",
      *helpers.python(os.path.join(helpers.SCRIPTS, "disagree.py"), mode)), timeout=timeout)


# Each way workers may disagree: the words every task ends with.
DISAGREEMENTS = {
    "wider": r"variable \d+, dense/kernel: \(4, 32\) float32 on worker:0, \(4, 64\) float32 on "
             r"worker:1\.",
    "layer_more": r"variable \d+: out/kernel \(32, 1\) float32 on worker:0, dense_1/kernel "
                  r"\(32, 32\) float32 on worker:1\.",
    "variable_fewer": r"variable \d+: out/bias \(1,\) float32 on worker:0, iteration \(\) int64 "
                      r"on worker:1\.",
    "variable_more": r"variable \d+, extra: only on worker:1; worker:0 made \d+ variables under "
                     r"this strategy and began training\.",
    "devices": r"fingerprint: replicas on this worker: 2 on worker:0, 1 on worker:1\.",
    "keras": r"fingerprint: keras in use: tf_keras on worker:0, keras3 on worker:1\.",
}


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(DISAGREEMENTS))
def test_workers_that_disagree_get_the_named_error_on_every_task(mode):
  result = _launch(mode)
  assert result.returncode != 0
  error = "Workers disagree before their first collective: " + DISAGREEMENTS[mode]
  # Each task ends with it, before TensorFlow's broadcast ("Shape mismatch in the collective"),
  # whether it found it itself or was in training when the other did.
  assert re.search(r"\[worker:0\] .*" + error, result.stdout), result.stdout[-3000:]
  assert re.search(r"\[worker:1\] .*" + error, result.stdout), result.stdout[-3000:]
  assert "Shape mismatch" not in result.stdout and "data_type" not in result.stdout
  assert "trained" not in result.stdout
