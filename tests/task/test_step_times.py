"""tfdist.task._step_times: each task's step time and input wait, median and p95; the straggler named."""

import dataclasses
import json
import re

import pytest

from tfdist.task import _step_times as step_times


def _row(task, step, wait, steps=50):
  return step_times.summarize(task, steps, [step] * steps, [] if wait is None else [wait] * steps)


def test_median_p95_and_share_of_the_steps_and_input_waits():
  row = step_times.summarize("worker:0", 20, [0.01 * i for i in range(1, 21)], [0.0] * 19 + [0.5])
  assert (row.task, row.steps) == ("worker:0", 20)
  assert abs(row.step_median - 0.105) < 1e-9 and abs(row.step_p95 - 0.19) < 1e-9
  assert (row.input_median, row.input_p95) == (0.0, 0.0)
  assert abs(row.input_share - 0.5 / 2.1) < 1e-9  # The waits' sum over the steps'.
  # Not measured (a custom loop's step_done): no input wait, not zero.
  unmeasured = step_times.summarize("worker:1", 3, [0.1, 0.2, 0.3])
  assert (unmeasured.input_median, unmeasured.input_p95, unmeasured.input_share) == (
      None, None, None)
  assert step_times.summarize("ps:0", 0, []).step_median == 0.0


def test_the_task_the_others_wait_for_is_named_input_bound():
  # A synchronous job: every step as long as the slowest's; worker:1 waits for its input.
  rows = [_row("worker:0", 0.100, 0.0), _row("worker:1", 0.101, 0.095),
          _row("worker:2", 0.100, 0.001)]
  assert step_times.straggler(rows) == (
      "worker:1 holds the others back, waiting for its input (94% of its steps; input wait "
      "95.0 ms median, 95.0 ms p95, in a 101.0 ms step); the other tasks wait 0% of theirs "
      "for input (median) and the rest for it, in the collectives")
  # Every other step waiting (a strategy that splits one element into two steps) is named too.
  halves = step_times.summarize("worker:1", 50, [0.1] * 50, [0.09, 0.0] * 25)
  assert step_times.straggler([_row("worker:0", 0.1, 0.0), halves]).startswith(
      "worker:1 holds the others back, waiting for its input (45% of its steps")
  # Alike tasks name no one, nor does a small wait, nor a single task, nor too few steps.
  assert step_times.straggler([_row("worker:0", 0.1, 0.0), _row("worker:1", 0.1, 0.001)]) is None
  assert step_times.straggler([_row("worker:0", 0.1, 0.01), _row("worker:1", 0.1, 0.014)]) is None
  assert step_times.straggler([_row("worker:1", 0.1, 0.095)]) is None
  assert step_times.straggler([_row("worker:0", 0.1, 0.0),
                               _row("worker:1", 0.1, 0.095, steps=4)]) is None


@pytest.mark.parametrize("waits", [(0.06, 0.06), (0.03, 0.04), (0.021, 0.065, 0.04)])
def test_tasks_that_all_wait_for_their_input_make_an_input_bound_job_with_no_one_named(waits):
  # The same slow input on every task: 65% against 40% is no straggler (one measured so).
  rows = [_row(f"worker:{i}", 0.1, wait) for i, wait in enumerate(waits)]
  line = step_times.straggler(rows)
  assert line.startswith("the job is input-bound: every task waits for its input (")
  assert "holds the others back" not in line and "worker:" not in line
  # One task that keeps up is enough for the task that does not to be named.
  rows.append(_row("worker:9", 0.1, 0.001))
  assert step_times.straggler(rows).startswith(
      f"worker:{max(range(len(waits)), key=lambda i: waits[i])} holds the others back")


def test_a_task_markedly_slower_than_the_median_is_named_with_why():
  # Tasks that do not wait for each other (parameter-server workers).
  computing = [_row("worker:0", 0.05, 0.0), _row("worker:1", 0.05, 0.001),
               _row("worker:2", 0.2, 0.001)]
  assert step_times.straggler(computing) == (
      "worker:2 is markedly slower than the other tasks (200.0 ms a step against 50.0 ms, their "
      "median): computing (200.0 ms a step, median, 0% of it input wait)")
  waiting = [_row("worker:0", 0.05, None), _row("worker:1", 0.2, 0.15)]
  assert step_times.straggler(waiting) == (
      "worker:1 is markedly slower than the other tasks (200.0 ms a step against 50.0 ms, their "
      "median): waiting for its input (75% of its steps; input wait 150.0 ms median, 150.0 ms "
      "p95, in a 200.0 ms step)")
  # Two tasks: 1.6 times the other's step is named (the slower's own step is no yardstick).
  assert step_times.straggler([_row("worker:0", 0.1, None), _row("worker:1", 0.16, None)]) == (
      "worker:1 is markedly slower than the other tasks (160.0 ms a step against 100.0 ms, their "
      "median): computing (160.0 ms a step, median)")
  assert step_times.straggler([_row("worker:0", 0.1, None), _row("worker:1", 0.14, None)]) is None


@pytest.mark.parametrize("others", [1, 2])
def test_synchronous_tasks_at_one_pace_name_no_one_whatever_their_medians(others):
  # A 2-worker loop job that checkpoints every 2 steps, measured: the chief's save lands in
  # its own steps, the other workers wait for it in their next collective. Medians 18.0
  # against 0.9 ms; the same 6 steps took every task the same 74 ms. Before, "worker:0 is
  # markedly slower than the other tasks (18.0 ms a step against 0.9 ms ...)".
  chief = step_times.summarize("worker:0", 6, [0.018] * 4 + [0.0009] * 2)
  rows = [chief] + [step_times.summarize(f"worker:{i}", 6, [0.0009] * 4 + [0.0352] * 2)
                    for i in range(1, others + 1)]
  assert chief.step_median > 10 * rows[1].step_median
  assert abs(chief.step_mean - rows[1].step_mean) < 1e-3
  assert step_times.straggler(rows) is None
  # A task whose pace is slower too is named, as before.
  slow = step_times.summarize("worker:9", 6, [0.03] * 4 + [0.009] * 2)
  assert step_times.straggler(rows + [slow]).startswith(
      "worker:9 is markedly slower than the other tasks (30.0 ms a step against ")
  # A row without a mean (a row kept by an earlier version) is judged by its median alone.
  unknown = dataclasses.replace(chief, step_mean=None)
  assert step_times.straggler([unknown] + rows[1:]).startswith("worker:0 is markedly slower")


def test_the_table_and_the_rows_a_task_writes(tmp_path):
  rows = [_row("worker:0", 0.1, 0.0), _row("worker:1", 0.1, None, steps=7)]
  for row in rows:
    (tmp_path / f"{row.task.replace(':', '-')}.steps").write_text(step_times.to_text(row))
  (tmp_path / "worker-2.steps").write_text("{half a row")  # Skipped, as a file mid-write.
  assert step_times.read(str(tmp_path)) == rows
  assert step_times.table(rows).splitlines() == [
      "task          steps  step ms median      p95  input wait ms median      p95  input share",
      "worker:0         50           100.0    100.0                   0.0      0.0           0%",
      "worker:1          7           100.0    100.0                     -        -            -"]


def test_a_row_no_task_writes_is_skipped_not_raised(tmp_path):
  good = _row("worker:0", 0.1, 0.0)
  (tmp_path / "worker-0.steps").write_text(step_times.to_text(good))
  fields = json.loads(step_times.to_text(_row("worker:1", 0.1, 0.0)))
  bad = {"steps": None, "step_median": "fast", "input_share": float("nan"), "task": "worker:7",
         "step_mean": -0.1, "steps ": 3}  # The last: a field no row has.
  for number, (field, value) in enumerate(bad.items(), start=1):
    (tmp_path / f"worker-{number}.steps").write_text(json.dumps(
        {**fields, "task": f"worker:{number}", field: value}))
  (tmp_path / "ps-0.steps").write_text(json.dumps({**fields, "task": "ps:0", "steps": True}))
  (tmp_path / "root-0.steps").write_text(json.dumps({**fields, "task": "root:0"}))
  (tmp_path / "worker-8.steps").write_text(json.dumps({**fields, "task": "worker:8",
                                                       "steps": "50"}))
  (tmp_path / "worker-9.steps").write_text("[1, 2]")
  assert step_times.read(str(tmp_path)) == [good]


def test_a_row_carried_as_text_reads_back_and_a_forged_one_does_not():
  row = step_times.summarize("worker:1", 9, [0.1] * 9, [0.01] * 9)
  assert step_times.from_text(step_times.to_text(row)) == row
  for text in ('{"task": "worker:1", "steps": -1, "step_median": 0.1, "step_p95": 0.1}',
               '{"task": "../x", "steps": 1, "step_median": 0.1, "step_p95": 0.1}',
               '["worker:1"]', "not json"):
    with pytest.raises(ValueError):
      step_times.from_text(text)


def test_rows_from_another_machine_are_kept_only_as_their_own_tasks():
  # A Ray actor's rows, a row published in TF's coordination service: each speaks for one task.
  own = step_times.summarize("worker:1", 6, [0.1] * 6)
  other = step_times.summarize("worker:0", 6, [0.9] * 6)  # Another task's, forged.
  texts = [step_times.to_text(other), step_times.to_text(own), "[" * 100_000, 7]
  assert step_times.rows_of(texts, "worker:1") == [own]
  assert step_times.rows_of("not a list", "worker:1") == []


def _profiled(task, step_ms, input_ms, collectives_ms, steps=3):
  """A row as `tfdist.task._profile_summary.read` makes it from a task's trace."""
  step, wait = step_ms / 1000, input_ms / 1000
  return step_times.TaskSteps(task, steps, step, None, input_median=wait,
                              input_share=wait / step, step_mean=step,
                              collective_wait=collectives_ms / 1000)


@pytest.mark.parametrize("input_ms, why", [(119.6, "input-bound: it waits for its input "
                                                    "pipeline (119.6 ms of input wait"),
                                           (1.0, "computing: its steps take longer (1.0 ms")])
def test_a_profile_names_the_task_the_others_wait_for_in_the_collectives(input_ms, why):
  # Three steps traced: too few for the rows tasks write, enough for a profile's means.
  rows = [_profiled("worker:0", 130.6, 0.1, 128.2), _profiled("worker:1", 128.3, input_ms, 3.2),
          _profiled("worker:2", 131.0, 0.2, 127.9)]
  line = step_times.straggler(rows)
  assert line.startswith(f"worker:1 is the straggler, {why}"), line
  assert line.endswith("while the others wait 127.9 ms or more per step in collectives"), line
  text = step_times.table(rows)
  assert text.splitlines()[0].endswith("collectives ms")
  assert re.search(r"^worker:1 +3 +128\.3 +- +[\d.]+ +- +\d+% +3\.2$", text, re.M), text


def test_a_profile_whose_tasks_wait_alike_in_the_collectives_names_no_one():
  rows = [_profiled("worker:0", 130.0, 0.1, 60.0), _profiled("worker:1", 130.0, 0.1, 100.0)]
  assert step_times.straggler(rows) is None  # 100 < 2 x 60 + 1 ms.
  # A live table has no collectives column.
  assert "collectives" not in step_times.table(
      [step_times.summarize("worker:0", 50, [0.1] * 50)])


def test_a_live_row_carries_no_profile_field_an_older_reader_would_refuse():
  text = step_times.to_text(step_times.summarize("worker:1", 7, [0.1] * 7, [0.01] * 7))
  assert "collective_wait" not in json.loads(text)
  assert step_times.from_text(text).collective_wait is None
