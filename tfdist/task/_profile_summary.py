"""Per task, from `tfdist launch --profile`'s traces: step time, input wait, time in collectives.

Each task's run under the profile directory holds one trace; `read` makes a
`tfdist.task._step_times.TaskSteps` row of it, the rows tasks write while they
train, with their wait in the collectives besides. In a synchronous job every
task's step lasts as long as the slowest's: the others wait in the
collectives. So the task to look at is the one that waits least there, and
why is where its step went: waiting for input (the iterator's get-next) or
computing (`step_times.straggler`).

Example:

    >>> rows = read("tfdist-profile")
    >>> print(step_times.table(rows)); print(step_times.straggler(rows))
"""

import glob
import os
import signal
from typing import List

from tfdist.task import _step_times as step_times
from tfdist.task import progress


def read(profile_dir: str) -> List[step_times.TaskSteps]:
  """A row per task run under `profile_dir` (its newest trace), with its collectives' wait.

  A trace gives each step's mean only: the row's medians are its means, its
  p95s None.
  """
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
    step, wait = step_ms / steps / 1000, input_ms / steps / 1000
    rows.append(step_times.TaskSteps(
        progress.task_name(run), steps, step, None, input_median=wait,
        input_share=min(1.0, wait / step) if step else None, step_mean=step,
        collective_wait=collective_ms / steps / 1000))
  return rows


# A task killed by SIGABRT or SIGSEGV, as a launch's exit code (128 + N, as shells do).
_CRASHED = (128 + signal.SIGABRT, 128 + signal.SIGSEGV)


def report(steps: str, profile_dir: str, exit_code: int) -> List[str]:
  """What a launch traced with `--profile=steps` says at its end, a line each.

  The runs written under `profile_dir`, the per-task table of the profiled steps
  with the straggler if one stands out, and the profiler's known crash when a
  task ended with SIGABRT or SIGSEGV.
  """
  runs = sorted(os.listdir(profile_dir)) if os.path.isdir(profile_dir) else []
  lines = [f"profile of steps {steps}: {profile_dir}, one run per task: "
           f"{runs or 'none written (did the job reach those steps?)'}. View it with "
           f"`tensorboard --logdir {profile_dir}` (pip install tensorboard "
           "tensorboard-plugin-profile) or xprof."]
  if runs:
    try:
      rows = read(profile_dir)
    except Exception as e:  # pylint: disable=broad-except  The job's exit code stands.
      rows = []
      lines.append(f"no per-task summary of the profile: {e!r}")
    if rows:
      lines.append("per task, per profiled step:\n" + step_times.table(rows))
      line = step_times.straggler(rows)
      if line:
        lines.append(line)
  if exit_code in _CRASHED:
    lines.append(
        "a task ended with SIGABRT or SIGSEGV in a job traced with --profile: TensorFlow "
        "2.21's profiler can corrupt a task's memory when it collects the trace of a "
        "multi-worker job (docs/known_issues.md, \"TF's profiler in a multi-worker job\"). "
        "Run the job again, or trace fewer steps; a job that keeps a backup resumes from it "
        f"under --max_restarts. Received: exit code {exit_code}")
  return lines
