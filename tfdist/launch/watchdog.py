"""The stall watchdog: a job whose tasks are alive but no step completes anywhere.

One worker blocked in its input pipeline, a hung file system or a lock, and
every other worker waits in the all-reduce forever (tensorflow/tensorflow#35878).
Each task reports its progress to a file in a private directory the launcher
owns (`tfdist.task.progress`); `StallWatchdog.check` reads them. The watchdog arms
when a task first reports, as it starts, and watches the whole job: start-up,
the model's build and the check that compares it across workers, each step,
evaluation, the exit. A stall is no new report from any task within the limit:

- `timeout` seconds while steps run, or 20 times the slowest task's mean
  step when that is longer (a job whose steps take minutes);
- three times that, and at least a minute (`TFDIST_BOUNDARY_SECONDS`), while
  any task is in another phase (start-up, building its model, a boundary where
  the next step may compile: `fit`, an epoch, evaluation);
- at least START_UP_SECONDS (30 min) while every task is still in start-up,
  before its strategy exists (pods that start minutes apart, data prepared
  first).

The stall line says which phase each task was in (`progress.PHASES`).

On a stall `stacks()` has every task dump the Python stack of each of its
threads (SIGUSR1, `faulthandler`), and `culprit()` names the task to look at:
one with a thread in code of its own rather than inside TensorFlow (a task
waiting in a collective sits in TensorFlow), else the one furthest behind.
At the end `step_summary()` is every task's table of step times and input
waits from the same directory (`tfdist.task.progress`), with the straggler named.

Example:

    >>> watchdog = StallWatchdog(directory, timeout=300)
    >>> stall = watchdog.check()      # None while some task moves
"""

import dataclasses
import logging
import os
import re
import signal
import subprocess
import time
from typing import ContextManager, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

from tfdist import _folders as folders
from tfdist.task import _step_times as step_times
from tfdist import _variables as variables
from tfdist.task import progress

logger = logging.getLogger("tfdist")
# Seconds without a step anywhere before a job is stalled, unless told.
DEFAULT_STALL_TIMEOUT = 300.0
STALL_TIMEOUT_ENV = variables.STALL_TIMEOUT
# How long a boundary's first step (compile, a new iterator) may take: this many
# timeouts, and at least BOUNDARY_SECONDS (a first compile on a busy machine), or
# what BOUNDARY_SECONDS_ENV says (a small model on an idle machine compiles in
# seconds; a large one may need longer than three timeouts).
BOUNDARY_FACTOR = 3.0
BOUNDARY_SECONDS = 60.0
BOUNDARY_SECONDS_ENV = variables.BOUNDARY_SECONDS
# How many mean steps of the slowest task fit in the limit, when that is longer.
STEP_FACTOR = 20.0
# While every task is still in start-up (none has built its strategy): at least this
# long. Pods of one job may start minutes apart (image pulls, a scheduler placing
# them), and a task may prepare data first; a peer that never starts is preflight's
# (30 s), a task that ended while the others wait gets the first step's limit.
START_UP_SECONDS = 1800.0
# Exit code of a job (or, under `tfdist task`, a task) ended by the watchdog.
STALL_EXIT_CODE = 3
# Seconds the tasks get to write their stacks after SIGUSR1.
STACKS_WAIT = 5.0

_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
_TFDIST_DIR = os.path.dirname(os.path.abspath(progress.__file__))


def resolve_timeout(timeout: Optional[float], num_training_tasks: int,
                    environ: Optional[Mapping[str, str]] = None) -> float:
  """Seconds of the watchdog's limit; 0 is off.

  Explicit `timeout`, else `TFDIST_STALL_TIMEOUT`, else DEFAULT_STALL_TIMEOUT
  for a job of two or more training tasks (one task waits for nobody).
  """
  environ = os.environ if environ is None else environ
  source = "stall_timeout"
  if timeout is None and environ.get(STALL_TIMEOUT_ENV, "") != "":
    source, timeout = STALL_TIMEOUT_ENV, environ[STALL_TIMEOUT_ENV]
    try:
      timeout = float(timeout)
    except ValueError:
      timeout = None
  if timeout is None and source == STALL_TIMEOUT_ENV:
    raise ValueError(f"`{STALL_TIMEOUT_ENV}` must be a number of seconds >= 0 (0: no "
                     f"watchdog). Received: {STALL_TIMEOUT_ENV}={environ[STALL_TIMEOUT_ENV]!r}")
  if timeout is None:
    return DEFAULT_STALL_TIMEOUT if num_training_tasks > 1 else 0.0
  if not isinstance(timeout, (int, float)) or timeout < 0:
    raise ValueError(f"`{source}` must be a number of seconds >= 0 (0: no watchdog). "
                     f"Received: {source}={timeout!r}")
  return float(timeout)


def resolve_boundary_seconds(environ: Optional[Mapping[str, str]] = None) -> float:
  """The least limit while a task is outside its steps: BOUNDARY_SECONDS_ENV, else BOUNDARY_SECONDS."""
  environ = os.environ if environ is None else environ
  text = environ.get(BOUNDARY_SECONDS_ENV, "")
  if text == "":
    return BOUNDARY_SECONDS
  try:
    seconds = float(text)
  except ValueError:
    seconds = -1.0
  if not seconds >= 0 or seconds == float("inf"):
    raise ValueError(f"`{BOUNDARY_SECONDS_ENV}` must be a number of seconds >= 0: the least "
                     f"time a first step may take. Received: {BOUNDARY_SECONDS_ENV}={text!r}")
  return seconds


@dataclasses.dataclass(frozen=True)
class Report:
  """One task's last progress line."""

  pid: int
  steps: int
  events: int
  phase: str
  mean_step: float


@dataclasses.dataclass(frozen=True)
class Stall:
  """No progress anywhere for `seconds` (the limit was `limit`)."""

  seconds: float
  limit: float
  reports: Mapping[str, Report]


def progress_directory() -> ContextManager[str]:
  """A new directory for the tasks' progress files (0700), removed when the block ends, also if
  this process is SIGKILLed in it."""
  return folders.temporary("tfdist-progress-")


def read_report(path: str) -> Optional[Report]:
  """The report in `path`, or None if there is none (yet)."""
  try:
    with open(path, encoding="utf-8") as f:
      pid, steps, events, phase, mean = f.read().split()
    return Report(int(pid), int(steps), int(events), phase, float(mean))
  except (OSError, ValueError):
    return None


class StallWatchdog:
  """Watches the progress files in `directory` (see the module doc)."""

  def __init__(self, directory: str, timeout: float, clock=time.monotonic,
               environ: Optional[Mapping[str, str]] = None):
    self.directory, self.timeout, self.clock = directory, timeout, clock
    self.boundary_seconds = resolve_boundary_seconds(environ)
    self.reset()

  def reset(self) -> None:
    """Forgets every report and removes the files: a new attempt starts from nothing."""
    for name in os.listdir(self.directory):
      os.remove(os.path.join(self.directory, name))
    self.seen: Dict[str, Tuple[int, float]] = {}  # task -> (events, when it changed)

  def reports(self) -> Dict[str, Report]:
    """Each task's last report, by task name ('worker:1')."""
    found = {}
    for name in sorted(os.listdir(self.directory)):
      if name.endswith(progress.PROGRESS_SUFFIX):
        report = read_report(os.path.join(self.directory, name))
        if report is not None:
          found[progress.task_name(name[:-len(progress.PROGRESS_SUFFIX)])] = report
    return found

  def check(self) -> Optional[Stall]:
    """A `Stall` if no task reported anything within the limit, else None."""
    if not self.timeout:
      return None
    now = self.clock()
    reports = self.reports()
    for task, report in reports.items():
      if self.seen.get(task, (None,))[0] != report.events:
        self.seen[task] = (report.events, now)
    if not self.seen:
      return None  # Not armed: no task has started.
    if all(r.phase == progress.END for r in reports.values()):
      return None  # Training is over everywhere: the tasks are on their way out.
    limit = self.limit(reports)
    quiet = now - max(when for _, when in self.seen.values())
    return Stall(quiet, limit, reports) if quiet > limit else None

  def limit(self, reports: Mapping[str, Report]) -> float:
    """Seconds without progress that make a stall, for these reports."""
    limit = max([self.timeout] + [STEP_FACTOR * r.mean_step for r in reports.values()])
    # A task that has not trained yet (start-up, its model's build), or just began fit,
    # an epoch or an evaluation, may be compiling: its first step may be slow.
    if any(r.phase not in (progress.STEP, progress.END) for r in reports.values()):
      limit = max(limit * BOUNDARY_FACTOR, self.boundary_seconds)
    if all(r.phase == progress.STARTED for r in reports.values()):
      limit = max(limit, START_UP_SECONDS)
    return limit

  def stacks(self, reports: Mapping[str, Report], wait: float = STACKS_WAIT) -> Dict[str, str]:
    """Every reporting task's Python stacks (all threads), by task name."""
    paths = {}
    for task, report in reports.items():
      if report.phase == progress.END:
        continue  # Gone or leaving: its pid may be another process's by now.
      path = os.path.join(self.directory, progress.file_name(task) + progress.STACKS_SUFFIX)
      paths[task] = path
      try:
        os.kill(report.pid, progress.STACKS_SIGNAL)
      except (ProcessLookupError, PermissionError):
        pass
    # faulthandler writes thread by thread: read once nothing changed for a moment.
    deadline, texts, settled = self.clock() + wait, {}, 0
    while self.clock() < deadline and settled < 3:
      time.sleep(0.2)
      before, texts = texts, {task: _read(path) for task, path in paths.items()}
      settled = settled + 1 if texts == before and all(texts.values()) else 0
    return texts


def _read(path: str) -> str:
  try:
    with open(path, encoding="utf-8", errors="replace") as f:
      return f.read()
  except OSError:
    return ""


def _is_python(path: str) -> bool:
  """Python's own modules (threading, queue, ...)."""
  return path.startswith("<frozen") or path == "???" or (
      re.search(r"/lib/python3[.\d]*/", path) is not None and "-packages" not in path)


def _is_package(path: str) -> bool:
  """Installed packages (TensorFlow, Keras, ...) and tfdist."""
  return path.startswith(_TFDIST_DIR + os.sep) or "-packages" + os.sep in path


def own_code_frames(stacks: str) -> List[str]:
  """Per thread in a faulthandler dump, where it is in code of its own, if it is.

  The innermost frame that is neither Python's nor an installed package's:
  a thread inside TensorFlow (a collective, the input pipeline's C++) has none
  above TensorFlow's own frames, so it counts only if its innermost frame is
  the program's.
  """
  found, frames = [], []

  def close():
    for file, line, function in frames:
      if _is_python(file):
        continue  # threading's wait, a queue's get: whose call is it?
      if not _is_package(file):
        found.append(f"{function} ({file}:{line})")
      break  # Inside an installed package first: it waits there.

  for text in stacks.splitlines():
    if _THREAD.match(text):
      close()
      frames = []
    else:
      match = _FRAME.match(text)
      if match:
        frames.append((match.group(1), match.group(2), match.group(3)))
  close()
  return found


def culprit(stall: Stall, stacks: Mapping[str, str]) -> str:
  """One line naming the task to look at, and why."""
  busy = {task: own_code_frames(text) for task, text in stacks.items()}
  busy = {task: frames for task, frames in busy.items() if frames}
  if busy and len(busy) < len(stacks):
    task, frames = sorted(busy.items())[0]
    return _in_own_code(task, frames[0]) + (
        f" and {len(busy) - 1} more task(s)" if len(busy) > 1 else "")
  ended = sorted(t for t, r in stall.reports.items() if r.phase == progress.END)
  waiting = sorted(t for t, r in stall.reports.items() if r.phase != progress.END and not r.steps)
  if ended and waiting:
    return (f"{' and '.join(ended)} ended while {' and '.join(waiting)} never began training: "
            "a task that builds no strategy over the cluster (or another strategy, or exits "
            "early) leaves the others waiting for it")
  steps = {task: r.steps for task, r in stall.reports.items()}
  if steps and min(steps.values()) < max(steps.values()):
    task = min(steps, key=steps.get)
    return (f"{task} is furthest behind: {steps[task]} steps, the others up to "
            f"{max(steps.values())}")
  return ("every task waits inside TensorFlow at step "
          f"{max(steps.values()) if steps else 0} (a collective, or an input pipeline's C++ "
          "code): see each task's stacks above")


def _in_own_code(task: str, frame: str) -> str:
  return f"{task} is not waiting inside TensorFlow (a collective waits there): it is in {frame}"


def describe(stall: Stall) -> str:
  """One line saying how long nothing moved, the limit, each task's steps and its phase."""
  steps = ", ".join(f"{task} {r.steps}" for task, r in sorted(stall.reports.items()))
  return (f"no training step completed anywhere for {stall.seconds:.0f}s (the limit: "
          f"{stall.limit:g}s; steps done: {steps}); {phases(stall.reports)}")


def phases(reports: Mapping[str, Report]) -> str:
  """Which phase the job stalled in, and each task's, e.g. 'in start-up: worker:0 is ...'."""
  order = list(progress.PHASES)
  earliest = min((r.phase for r in reports.values()),
                 key=lambda p: order.index(p) if p in order else 0, default=progress.STEP)
  before = earliest in (progress.STARTED, progress.BUILD, progress.CHECK)
  early = [r for r in reports.values() if r.phase in (progress.STARTED, progress.BUILD,
                                                      progress.CHECK)]
  if before and not any(r.steps for r in early):
    job = "in start-up, before its first step"
  elif before:
    job = "while a model was built"  # Another model, after training began.
  else:
    job = "in training" if earliest in (progress.STEP, progress.END) else "at a boundary"
  tasks = ", ".join(f"{task} {progress.PHASES.get(r.phase, r.phase)}"
                    for task, r in sorted(reports.items()))
  return f"the job stalled {job}: {tasks}"


def where(task: str, stacks: str) -> str:
  """One line saying where a single task is, from its stacks (for a task watched alone)."""
  frames = own_code_frames(stacks)
  if frames:
    return _in_own_code(task, frames[0])
  return (f"{task} waits inside TensorFlow (a collective, or an input pipeline's C++ code): "
          "compare its stacks with the other tasks'")


def step_summary(directory: str) -> Optional[str]:
  """Every training task's steps in `directory`, as a table, and the straggler if one stands out.

  The tasks' rows (`tfdist.task.progress` writes them once a second and when
  training ends): steps, then milliseconds per step, median and p95, of the
  step and of its input wait. None when no task trained. A launcher calls it
  at the job's end, before removing the directory.

  Example:

      >>> text = step_summary(watchdog.directory)   # None, or the table and straggler line
  """
  rows = [row for row in step_times.read(directory) if row.steps]
  if not rows:
    return None
  line = step_times.straggler(rows)
  return ("per task, its training steps:\n" + step_times.table(rows) +
          (f"\n{line}" if line else ""))


def keep_steps(directory: str, folder: str) -> None:
  """Copies the rows of step times in `directory` that read as rows into `folder`, if it exists."""
  keep_rows(step_times.read(directory), folder)


def keep_rows(rows: Sequence[step_times.TaskSteps], folder: str) -> None:
  """Writes `rows` into `folder` as their tasks write them, for `step_summary`; none if it is gone."""
  if not os.path.isdir(folder):
    return
  for row in rows:
    path = os.path.join(folder, row.task.replace(":", "-") + step_times.STEPS_SUFFIX)
    try:  # Whole: a chief reads the folder while it is written.
      with open(path + ".new", "w", encoding="utf-8") as f:
        f.write(step_times.to_text(row))
      os.replace(path + ".new", path)
    except OSError as error:  # The job's exit code stands; the table lacks a row.
      logger.warning("tfdist: could not keep %s's step times in %s: %s", row.task, folder, error)


def watch_task(command: Sequence[str], env: Mapping[str, str], task: str, timeout: float,
               output: TextIO, grace_period: float, preexec_fn=None,
               passed_on: Optional[List[int]] = None,
               keep_steps_in: Optional[str] = None) -> int:
  """Runs `command` as a child watched alone (`tfdist task` in a pod); its exit code.

  Where the launcher cannot see every task (a Kubernetes pod), each task's
  wrapper watches its own: in a stalled job every task stops at once, so each
  dumps its stacks into its own log, says where it is, and exits with
  STALL_EXIT_CODE for the platform to restart the job. SIGTERM and SIGINT are
  passed on to the child; `preexec_fn` runs in it before the command (e.g.
  `supervision.die_with_parent`, so that a killed wrapper leaves no task).
  Each signal passed on is appended to `passed_on`, if given: the caller can
  then tell a command that ended on its own from one that was stopped.
  `keep_steps_in`: a folder the launcher reads at the job's end (`step_summary`),
  where this task's row of step times goes every second and when the command
  ends (a SLURM job's records folder, which its nodes share); the command's
  chief reads the other tasks' rows there at each epoch's end. Without one
  (pods), each task's row goes to TensorFlow's coordination service, where
  the chief reads it (`tfdist.task.progress.STEPS_PUBLISHED_ENV`; "0" in `env` turns
  that off).
  """
  with progress_directory() as directory:  # Removed also if this wrapper is SIGKILLed.
    # In this wrapper's process group: a launcher that kills the group (Ray's actor,
    # even by SIGKILL) takes the command and whatever it started with it. A signal
    # to the wrapper alone (a pod's PID 1) is passed on to the command.
    # Where the tasks share no folder (pods), their rows meet in TF's coordination
    # service, unless the user turned that off ("0").
    shared = ({progress.STEPS_SHARED_ENV: keep_steps_in} if keep_steps_in else
              {progress.STEPS_PUBLISHED_ENV: env.get(progress.STEPS_PUBLISHED_ENV, "1")})
    child = subprocess.Popen(list(command),
                             env={**env, progress.PROGRESS_DIR_ENV: directory, **shared},
                             preexec_fn=preexec_fn)
    def forward(signum, frame):
      if passed_on is not None:
        passed_on.append(signum)
      _signal(child, signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
      dog = StallWatchdog(directory, timeout)
      while True:
        try:
          code = child.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
          if keep_steps_in:  # The chief names a straggler from the rows there as it trains.
            keep_steps(directory, keep_steps_in)
        else:
          summary = step_summary(directory)  # This task's row: its log holds it.
          if summary:
            output.write(f"tfdist task: {summary}\n")
            output.flush()
          if keep_steps_in:
            keep_steps(directory, keep_steps_in)
          return code
        stall = dog.check()
        if stall is None:
          continue
        text = dog.stacks(stall.reports).get(task, "")
        output.write(f"tfdist task: {task}'s Python stacks:\n{text}")
        output.write(f"tfdist task: stalled: {describe(stall)}; {where(task, text)}; "
                     "stopping it\n")
        output.flush()
        _signal(child, signal.SIGTERM)
        try:
          child.wait(timeout=grace_period)
        except subprocess.TimeoutExpired:
          pass
        _signal(child, signal.SIGKILL)
        child.wait()
        if keep_steps_in:  # The stalled task's row matters most.
          keep_steps(directory, keep_steps_in)
        return STALL_EXIT_CODE
    finally:
      for sig, handler in previous.items():
        signal.signal(sig, handler)


def _signal(child: subprocess.Popen, signum: int) -> None:
  try:
    os.kill(child.pid, signum)
  except (ProcessLookupError, PermissionError):
    pass
