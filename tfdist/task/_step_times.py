"""Each task's step time and input wait while it trains: median, p95, and the straggler named.

One kind of row (`TaskSteps`), one `table` and one `straggler`, from two
readers: the rows tasks write while they train (`read`, `from_text`), and the
rows of `tfdist launch --profile`'s traces (`tfdist.task._profile_summary.read`),
which also know each task's wait in the collectives.

A launched task (`tfdist.task.progress`) keeps its last `WINDOW` step times and
input waits, and every `WRITE_SECONDS` (and at each epoch's end and the end of
training) writes their median and p95 to `<task>.steps` beside its progress
file. At each epoch's end the chief compares the tasks that ran the steps it
ran; the launcher prints every task's whole row at the job's end (`table`,
`straggler`). No TensorFlow here.

In a synchronous job every task's step lasts as long as the slowest's (the
others wait for it in the collectives), so step times alone name no one:
the task whose input wait stands out is the one the others wait for. A task
whose own steps are slower (a job whose tasks do not wait for each other:
each trains alone) is named by its step time, and why by its input wait. Its
median step and its mean both stand out: in a synchronous job the tasks'
medians can differ (a chief's checkpoint lands in one step of its own, while
the others wait for it in the next step's collective), but over the same
steps every task keeps the same pace. Such tasks are at different steps at
any one time, so the launcher's summary of whole rows at the job's end is
what names one.

Example:

    >>> rows = [summarize("worker:0", 50, [0.1] * 50, [0.0] * 50),
    ...         summarize("worker:1", 50, [0.1] * 50, [0.09] * 50)]
    >>> straggler(rows)
    'worker:1 holds the others back, waiting for its input (90% of its steps, ...'
"""

import dataclasses
import json
import logging
import math
import os
import re
import statistics
from typing import List, Optional, Sequence

logger = logging.getLogger("tfdist")

STEPS_SUFFIX = ".steps"
# The steps a task keeps (the most recent): its statistics are of these.
WINDOW = 1000
# Seconds between two writes of a task's statistics while it trains.
WRITE_SECONDS = 1.0
# Fewer steps than this name no one: too few to say.
MIN_STEPS = 5
# Markedly slower: this many times the other tasks' median step (or input wait).
MARKED = 1.5
# Input-bound: this share of a step waits for input (the TF profiler's 20%).
INPUT_BOUND_SHARE = 0.2
# Input waits below this (seconds a step) are noise, whatever their ratio.
NOISE_SECONDS = 0.002
# From a profile: the straggler is the task the others wait for in the collectives this
# many times longer than it waits there itself (and a millisecond more).
COLLECTIVE_MARKED = 2.0


@dataclasses.dataclass(frozen=True)
class TaskSteps:
  """One task's training steps: how many, seconds per step (median, p95), the input's share.

  `input_median`, `input_p95` and `input_share` (the input waits' sum over the
  steps' sum) are None where the input wait is not measured (a custom loop's
  `step_done()`; a `fit` whose input is no `tf.data.Dataset`). `step_mean`:
  the steps' mean, the task's pace (None: not known, as in a row written
  before it was kept). `collective_wait`: seconds a step waits in the
  collectives, known from a profile only; a profile's row knows means, so its
  medians are the means and its p95s None.
  """

  task: str
  steps: int
  step_median: float
  step_p95: Optional[float]
  input_median: Optional[float] = None
  input_p95: Optional[float] = None
  input_share: Optional[float] = None
  step_mean: Optional[float] = None
  collective_wait: Optional[float] = None


def _p95(ordered: Sequence[float]) -> float:
  """The nearest-rank 95th percentile of sorted values."""
  return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def summarize(task: str, steps: int, step_seconds: Sequence[float],
              input_seconds: Sequence[float] = ()) -> TaskSteps:
  """The median and p95 of a task's step times and input waits (empty: 0, and None)."""
  times = sorted(step_seconds)
  waits = sorted(input_seconds)
  median, p95 = (statistics.median(times), _p95(times)) if times else (0.0, 0.0)
  mean = statistics.fmean(times) if times else None
  if not waits:
    return TaskSteps(task, steps, median, p95, step_mean=mean)
  # A mean, not a median: where a strategy splits one element into two steps, every
  # other step waits, and the median falls on either side.
  share = min(1.0, statistics.fmean(waits) / mean) if times else 0.0
  return TaskSteps(task, steps, median, p95, statistics.median(waits), _p95(waits), share, mean)


def to_text(row: TaskSteps) -> str:
  """One JSON line, as a task writes its `.steps` file."""
  fields = dataclasses.asdict(row)
  if fields["collective_wait"] is None:  # A profile's only: an older reader knows no such field.
    del fields["collective_wait"]
  return json.dumps(fields)


# A task's name, as TF_CONFIG's task types and a file's stem (`worker-1`) give it.
_TASK = re.compile(r"(chief|worker|ps|evaluator):\d+")
_SECONDS = ("step_median", "step_p95")
_MAYBE_SECONDS = ("input_median", "input_p95", "input_share", "step_mean", "collective_wait")


def _seconds(value, optional: bool) -> bool:
  """Whether `value` is a finite number >= 0 (or None, where `optional`)."""
  if value is None:
    return optional
  return (isinstance(value, (int, float)) and not isinstance(value, bool) and
          math.isfinite(value) and value >= 0)


def _row(fields, stem: str) -> TaskSteps:
  """The row of the file `<stem>.steps`; ValueError where a field is not what a task writes."""
  if not isinstance(fields, dict) or set(fields) - {f.name for f in dataclasses.fields(TaskSteps)}:
    raise ValueError(f"not a row of step times: {fields!r}")
  task, steps = fields.get("task"), fields.get("steps")
  task_type, _, index = stem.rpartition("-")
  if not isinstance(task, str) or not _TASK.fullmatch(task) or task != f"{task_type}:{index}":
    raise ValueError(f"`task` must be the task its file names ({stem}). Received: {task!r}")
  if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
    raise ValueError(f"`steps` must be an int >= 0. Received: {steps!r}")
  for name in _SECONDS + _MAYBE_SECONDS:
    if not _seconds(fields.get(name), name in _MAYBE_SECONDS):
      raise ValueError(f"`{name}` must be a finite number >= 0. Received: {fields.get(name)!r}")
  return TaskSteps(**fields)


def from_text(text: str) -> TaskSteps:
  """The row of one `to_text` line (carried from another machine); ValueError if it is none."""
  fields = json.loads(text)
  task = fields.get("task") if isinstance(fields, dict) else None
  if not isinstance(task, str):
    raise ValueError(f"not a row of step times: {text[:200]!r}")
  return _row(fields, task.replace(":", "-"))


def rows_of(texts, task: str) -> List[TaskSteps]:
  """`task`'s rows among `texts` (`to_text` lines from another machine): anything else is left out.

  A task speaks for itself only: a row naming another task is dropped, as is
  text that is not a row (not JSON, deep nesting, not a list of lines).
  """
  rows = []
  for text in texts if isinstance(texts, list) else []:
    try:
      row = from_text(text)
    except (TypeError, ValueError, AttributeError, RecursionError):
      continue
    if row.task == task:
      rows.append(row)
  return rows


def read(directory: str) -> List[TaskSteps]:
  """Every task's row in `directory`, by task.

  A file that does not parse (mid-write) or holds no row a task writes (a
  field missing or of another type, another task's name) is skipped.
  """
  rows = []
  for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
    if name.endswith(STEPS_SUFFIX):
      try:
        with open(os.path.join(directory, name), encoding="utf-8") as f:
          rows.append(_row(json.load(f), name[:-len(STEPS_SUFFIX)]))
      except (OSError, ValueError, TypeError) as error:
        logger.debug("tfdist: skipped the step times of %s: %s", name, error)
  return sorted(rows, key=lambda r: r.task)


def _ms(seconds: Optional[float]) -> str:
  return "-" if seconds is None else f"{1000 * seconds:.1f}"


def table(rows: Sequence[TaskSteps]) -> str:
  """The rows as an aligned text table, milliseconds per step (a profile's: its collectives too)."""
  collectives = any(r.collective_wait is not None for r in rows)
  lines = [f"{'task':<12} {'steps':>6} {'step ms median':>15} {'p95':>8} "
           f"{'input wait ms median':>21} {'p95':>8} {'input share':>12}"
           + (f" {'collectives ms':>15}" if collectives else "")]
  lines += [f"{r.task:<12} {r.steps:>6} {_ms(r.step_median):>15} {_ms(r.step_p95):>8} "
            f"{_ms(r.input_median):>21} {_ms(r.input_p95):>8} {_percent(r.input_share):>12}"
            + (f" {_ms(r.collective_wait):>15}" if collectives else "") for r in rows]
  return "\n".join(lines)


def _percent(share: Optional[float]) -> str:
  return "-" if share is None else f"{100 * share:.0f}%"


def _why(row: TaskSteps) -> str:
  if row.input_share is not None and row.input_share >= INPUT_BOUND_SHARE:
    return (f"waiting for its input ({_percent(row.input_share)} of its steps; input wait "
            f"{_ms(row.input_median)} ms median, {_ms(row.input_p95)} ms p95, in a "
            f"{_ms(row.step_median)} ms step)")
  known = "" if row.input_share is None else f", {_percent(row.input_share)} of it input wait"
  return f"computing ({_ms(row.step_median)} ms a step, median{known})"


def _slower_pace(slowest: TaskSteps, rows: Sequence[TaskSteps]) -> bool:
  """Whether `slowest`'s mean step is MARKED times the others' median mean (True: not known).

  In a synchronous job the medians can differ while the means do not: every
  task takes the same time for the same steps.
  """
  if any(r.step_mean is None for r in rows):
    return True
  return slowest.step_mean > MARKED * statistics.median(
      r.step_mean for r in rows if r is not slowest)


def straggler(rows: Sequence[TaskSteps]) -> Optional[str]:
  """One line naming a task markedly slower than the other tasks, and why; None if none is.

  First a task whose median step is MARKED times the median of the other
  tasks', and whose mean step is MARKED times theirs too where every row has
  one (tasks that do not wait for each other); else, where steps are alike (a
  synchronous job), a line saying the job is input-bound when every task
  waits for its input at least INPUT_BOUND_SHARE of its steps (no task holds
  the others back), or a task whose share of its steps waiting for input is
  MARKED times the median task's, and at least INPUT_BOUND_SHARE: the one
  the others wait for. Tasks with fewer than MIN_STEPS steps are left out.

  Rows of a profile (every row knows its `collective_wait`, over however few
  steps were traced) name the task that waits least in the collectives, where
  the others wait there COLLECTIVE_MARKED times longer: in a synchronous job
  that is the task they wait for.
  """
  if len(rows) >= 2 and all(r.collective_wait is not None for r in rows):
    return _waited_for(rows)
  rows = [r for r in rows if r.steps >= MIN_STEPS]
  if len(rows) < 2:
    return None
  slowest = max(rows, key=lambda r: r.step_median)
  # The others' median, as for the input: with two tasks, the slowest's own step is no yardstick.
  typical = statistics.median(r.step_median for r in rows if r is not slowest)
  if slowest.step_median > MARKED * typical and _slower_pace(slowest, rows):
    return (f"{slowest.task} is markedly slower than the other tasks ({_ms(slowest.step_median)} "
            f"ms a step against {_ms(typical)} ms, their median): {_why(slowest)}")
  measured = [r for r in rows if r.input_share is not None]
  if len(measured) < 2:
    return None
  least = min(measured, key=lambda r: r.input_share)
  if least.input_share >= INPUT_BOUND_SHARE:  # No task's input keeps up: none is to blame.
    most = max(r.input_share for r in measured)
    return (f"the job is input-bound: every task waits for its input ({_percent(least.input_share)}"
            f"{'' if most == least.input_share else ' to ' + _percent(most)} of its steps), so "
            "none is the one the others wait for; speed up the input pipeline (every task's)")
  hungry = max(measured, key=lambda r: r.input_share)
  usual = statistics.median(r.input_share for r in measured if r is not hungry)
  if (hungry.input_share >= max(INPUT_BOUND_SHARE, MARKED * usual) and
      (hungry.input_share - usual) * hungry.step_median >= NOISE_SECONDS):
    return (f"{hungry.task} holds the others back, {_why(hungry)}; the other tasks wait "
            f"{_percent(usual)} of theirs for input (median) and the rest for it, in the "
            "collectives")
  return None


def _waited_for(rows: Sequence[TaskSteps]) -> Optional[str]:
  """The straggler among a profile's rows: the task the others wait for in the collectives."""
  slowest = min(rows, key=lambda r: r.collective_wait)
  others = min(r.collective_wait for r in rows if r is not slowest)
  if others < COLLECTIVE_MARKED * slowest.collective_wait + 0.001:
    return None
  input_wait = slowest.input_median or 0.0
  why = ("input-bound: it waits for its input pipeline" if input_wait >=
         INPUT_BOUND_SHARE * slowest.step_median else "computing: its steps take longer")
  return (f"{slowest.task} is the straggler, {why} ({_ms(input_wait)} ms of input wait in "
          f"a {_ms(slowest.step_median)} ms step) while the others wait "
          f"{_ms(others)} ms or more per step in collectives")
