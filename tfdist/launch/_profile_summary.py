"""Per task, from `tfdist launch --profile`'s traces: step time, input wait, time in collectives.

Each task's run under the profile directory holds one trace. In a synchronous
job every task's step lasts as long as the slowest's: the others wait in the
collectives. So the task to look at is the one that waits least there, and
why is where its step went: waiting for input (the iterator's get-next) or
computing.

Example:

    >>> rows = summarize("tfdist-profile")
    >>> print(table(rows)); print(straggler(rows))
"""

import dataclasses
import glob
import os
from typing import List, Optional

from tfdist import _step_times as step_times
from tfdist import progress

# A task is the straggler when the others wait in collectives this much longer than it.
MARKED = 2.0


@dataclasses.dataclass(frozen=True)
class TaskProfile:
  """One task's profiled steps, in milliseconds per step."""

  task: str
  steps: int
  step_ms: float
  input_ms: float
  collective_ms: float


def summarize(profile_dir: str) -> List[TaskProfile]:
  """A `TaskProfile` per task run under `profile_dir` (its newest trace)."""
  from tfdist.internals import xplane  # pylint: disable=import-outside-toplevel  Loads TF.
  rows = []
  for run in sorted(os.listdir(profile_dir)):
    traces = sorted(glob.glob(os.path.join(profile_dir, run, "plugins", "profile", "*",
                                           "*.xplane.pb")))
    events = xplane.host_events(traces[-1]) if traces else None
    if not events:
      continue
    step_ms, steps = max(((ms, n) for name, (ms, n) in events.items()
                          if name in ("train_function", "one_step_on_iterator")
                          or name.startswith("__inference_train")), default=(0.0, 0))
    steps = max(steps, 1)
    input_ms = sum(ms for name, (ms, _) in events.items() if name.startswith("IteratorGetNext")
                   and name.endswith("::DoCompute"))
    collective_ms = sum(ms for name, (ms, _) in events.items()
                        if name.rpartition(":")[2].startswith("Collective")
                        and "::" not in name)
    rows.append(TaskProfile(progress.task_name(run), steps, step_ms / steps, input_ms / steps,
                            collective_ms / steps))
  return rows


def table(rows: List[TaskProfile]) -> str:
  """The rows as an aligned text table."""
  lines = [f"{'task':<12} {'steps':>5} {'step ms':>9} {'input wait ms':>14} "
           f"{'collectives ms':>15}"]
  lines += [f"{r.task:<12} {r.steps:>5} {r.step_ms:>9.1f} {r.input_ms:>14.1f} "
            f"{r.collective_ms:>15.1f}" for r in rows]
  return "\n".join(lines)


def straggler(rows: List[TaskProfile]) -> Optional[str]:
  """One line naming the task the others wait for, and why; None if none stands out."""
  if len(rows) < 2:
    return None
  slowest = min(rows, key=lambda r: r.collective_ms)
  others = [r.collective_ms for r in rows if r is not slowest]
  if min(others) < MARKED * slowest.collective_ms + 1.0:
    return None
  why = ("input-bound: it waits for its input pipeline" if slowest.input_ms >=
         step_times.INPUT_BOUND_SHARE * slowest.step_ms else "computing: its steps take longer")
  return (f"{slowest.task} is the straggler, {why} ({slowest.input_ms:.1f} ms of input wait in "
          f"a {slowest.step_ms:.1f} ms step) while the others wait "
          f"{min(others):.1f} ms or more per step in collectives")
