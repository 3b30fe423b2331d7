"""A task's training progress, for the launcher's stall watchdog (no TensorFlow import).

Under `tfdist launch` every task gets `TFDIST_PROGRESS_DIR`, a directory only
the launcher's user can read (mode 0700). The task site calls
`install_from_env()` before the user's script runs: the task then

- writes one line to `<dir>/<task>.progress` at every training step (its pid,
  steps done, progress events, phase, mean seconds per step): one `pwrite`,
  microseconds, no thread;
- dumps the Python stack of every thread to `<dir>/<task>.stacks` when it
  receives SIGUSR1 (`faulthandler`, which works even while the main thread is
  blocked inside TensorFlow's C++ code);
- keeps its recent step times and input waits, and writes their median and
  p95 to `<dir>/<task>.steps` once a second and at each epoch's end; at each
  epoch's end the chief names a task markedly slower than the others in its
  log (`tfdist.task._step_times`). Where the tasks share no folder (Kubernetes
  pods: `STEPS_PUBLISHED_ENV`), each task also publishes its row in
  TensorFlow's coordination service, where the chief reads it.

A step's input wait is measured for a `fit` whose input is a `tf.data.Dataset`:
the task site passes its elements through a last `map` that notes when each
leaves the pipeline, and a step's wait is the time from its start to the
first element that left the pipeline after it (none: no wait). That is the
wait itself for a pipeline that does not keep up; for one that does, it is
at most the time the pipeline takes to make an element (it makes the next
while the step computes). It holds however the strategy splits elements
into steps, and where each task's pipeline makes only its own elements (one
task, sharding by files, or none). Where a multi-worker strategy shards the
dataset by DATA (what its AUTO default does where it cannot shard by files,
e.g. for a dataset that reads no files), each task's pipeline makes every
element and the shard after the stamp drops the other tasks': the first
element stamped after a step started may be one dropped, so there the wait
of a pipeline that does not keep up is a lower bound. A parameter-server strategy's input gets no stamp (its workers run
the dataset): its steps are timed, their input waits are not.

Keras `fit` reports its steps by itself (both Kerases: the task site adds a
callback to every `fit`); `tfdist.training.loop` does too under synchronous
strategies (under parameter servers only the chief steps, and the launcher's
watchdog is off for one training task unless asked). A custom loop calls
`tfdist.training.step_done()` once per step:

    >>> import tfdist
    >>> for step in range(3):
    ...   pass  # train one step
    ...   tfdist.training.step_done()

Outside a launch (no `TFDIST_PROGRESS_DIR`), `step_done()` only counts.

While an epoch of a Keras `fit` runs (verbose != 0), a launched task also logs
a status line every STATUS_SECONDS (`TFDIST_STATUS_SECONDS`, "0": none):

    tfdist: worker:1 epoch 1/3, step 120/256, 6.0 steps/s, loss 0.4312, about 23s left in this epoch

the same under both Kerases, whatever their bars do in a pipe (they redraw one
line with `\\r`, which the launcher passes on only every few seconds).
"""

import atexit
import collections
import faulthandler
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from typing import Any, Mapping, Optional, Tuple

from tfdist.task import _step_times as step_times
from tfdist import _variables as variables
from tfdist import output

logger = logging.getLogger("tfdist")

PROGRESS_DIR_ENV = variables.PROGRESS_DIR
# `tfdist launch --profile=FIRST-LAST`: every task traces those steps with
# TensorFlow's profiler into PROFILE_DIR/<task> (one run per task).
PROFILE_ENV = variables.PROFILE
PROFILE_DIR_ENV = variables.PROFILE_DIR
# A folder holding the other tasks' rows of step times, where each task has a
# progress directory of its own (`tfdist task` on SLURM: the job's records
# folder, which the nodes share): the chief reads them there too.
STEPS_SHARED_ENV = variables.STEPS_SHARED_DIR
# "1" where the tasks share no folder (`tfdist task` in Kubernetes pods, unless
# the user set "0"): each task's row goes to TensorFlow's coordination service
# as it trains, and the chief reads the other tasks' rows there at each
# epoch's end.
STEPS_PUBLISHED_ENV = variables.STEPS_PUBLISHED
# The key of a task's row in the coordination service's store.
STEPS_KEY = "tfdist/steps/{task}"
# How long the chief waits for one task's row (a publish deletes the old row before it
# inserts the new one: a read between waits), and for all of them, at an epoch's end.
READ_ROW_MS, READ_ROWS_SECONDS = 500, 2.0
# The chief's wait for the other tasks' rows of an epoch (their writes at its end; on
# SLURM, the wrappers' copies once a second; in pods, the publisher's next send).
ROWS_WAIT_SECONDS = 2 * step_times.WRITE_SECONDS
# "0": no input stamp (`stamped_input`): step times only, none of its cost per element.
INPUT_WAIT_ENV = variables.INPUT_WAIT
# Seconds between the status lines a task logs while an epoch of a Keras `fit` runs
# (`_Status`); "0": none. Keras's own bar shows nothing in a pipe until its line ends.
STATUS_SECONDS_ENV = variables.STATUS_SECONDS
STATUS_SECONDS = 10.0
PROGRESS_SUFFIX = ".progress"
STACKS_SUFFIX = ".stacks"
# The signal that makes a task dump every thread's stack into its stacks file.
STACKS_SIGNAL = signal.SIGUSR1
# Phases a progress line names: training steps run; or a boundary (fit starts,
# an epoch begins, evaluation), after which the first step may compile.
STEP, BOUNDARY = "step", "boundary"
# The task started and can dump its stacks; it has not begun training (it may
# never: a program that only prepares data). The watchdog is not armed by it.
STARTED = "started"
# Training is over (fit returned, or the process is exiting): nothing more to wait for.
END = "end"
# Before the first step, after start-up: a strategy's scope makes the model's variables
# (each one made is progress), or this task waits for the other tasks at the check that
# compares them (`tfdist.strategies.checked_variables`).
BUILD, CHECK = "build", "check"
# Each phase in words, for the stall line: where the job was when it stopped moving.
PHASES = {
    STARTED: "in start-up (importing, reading its data, or creating its strategy, which waits "
             "for every task)",
    BUILD: "building its model under its strategy",
    CHECK: "comparing its model with the other tasks' (waiting for one of them)",
    BOUNDARY: "starting fit, an epoch or an evaluation (a first step may compile)",
    STEP: "training",
    END: "done training",
}
_LINE_WIDTH = 96  # Fixed, so that one pwrite replaces the previous line whole.
# The name of the input pipeline's last step that notes when each element leaves it.
INPUT_STAMP = "tfdist_input_stamp"


def file_name(task: str) -> str:
  """The file stem of a task's files, e.g. 'worker-1' for task 'worker:1'."""
  task_type, _, index = task.rpartition(":")
  return f"{task_type}-{index}"


def task_name(stem: str) -> str:
  """The task a file stem names, e.g. 'worker:1' for 'worker-1' (`file_name`'s inverse)."""
  task_type, _, index = stem.rpartition("-")
  return f"{task_type}:{index}"


class _Reporter:
  """The counters of this process and the file they go to (None: count only)."""

  def __init__(self):
    self.lock = threading.Lock()
    self.fd: Optional[int] = None
    self.steps = 0
    self.events = 0
    self.first_step: Optional[float] = None
    self.phase = BOUNDARY
    self.profile: Optional[Tuple[int, int, str]] = None  # (first, last, log dir)
    self.profiling = False
    self.stem: Optional[str] = None  # This task's files: directory/stem.*
    self.task: Optional[str] = None  # This task (worker:1), for its status lines; None: none.
    self.status_seconds = STATUS_SECONDS
    self.clock = time.monotonic  # Read once per report (tests give a fake one).
    self.chief = False  # This task names the stragglers at each epoch's end.
    self.shared: Optional[str] = None  # STEPS_SHARED_ENV: the other tasks' rows.
    self.publishing = False  # STEPS_PUBLISHED_ENV: this task's row goes to the service.
    self.publisher: Optional["_Publisher"] = None  # Started at the first publish.
    self.peers: Tuple[str, ...] = ()  # The tasks whose published rows the chief reads.
    self.last: Optional[float] = None  # When the last step ended; None after a boundary.
    self.step_seconds = collections.deque(maxlen=step_times.WINDOW)
    self.input_seconds = collections.deque(maxlen=step_times.WINDOW)
    # When each element left the input pipeline (`stamped_input`, another thread), oldest first.
    self.stamps = collections.deque(maxlen=1024)
    self.stamped = False  # Whether this fit's input is stamped (else no input wait is known).
    self.stamping = True  # Whether fit's input gets the stamp at all (INPUT_WAIT_ENV).
    self.next_write = 0.0

  def report(self, steps: int, phase: str) -> float:
    """Counts `steps` more steps in `phase`; the clock's time of this report."""
    with self.lock:
      now = self.clock()
      if steps and self.first_step is None:
        self.first_step = now
      self.steps += steps
      self.events += 1
      self.phase = phase
      self._time(now, steps, phase)
      if self.profile is not None:
        self._profile()
      if self.fd is None:
        return now
      # The mean from the first step on: the first compile is not in it.
      mean = (now - self.first_step) / (self.steps - 1) if self.steps > 1 else 0.0
      line = f"{os.getpid()} {self.steps} {self.events} {phase} {mean:.6f}"
      os.pwrite(self.fd, line.ljust(_LINE_WIDTH - 1).encode() + b"\n", 0)
      if now >= self.next_write or phase == END:
        # Not at the end: the service's leader may be gone, and a call to it would wait.
        self.write_steps(now, publish=phase != END)
      return now

  def _time(self, now: float, steps: int, phase: str) -> None:
    """Notes the step time and input wait of `steps` steps that just ended."""
    if phase != STEP or not steps:
      self.last = None  # A boundary or an evaluation: the next interval is no step's.
      if phase == END:
        self.stamped = False  # The next fit's input may be no dataset.
      return
    first = None  # The first element that left the pipeline since the last step ended.
    while self.stamps and self.stamps[0] <= now:
      stamp = self.stamps.popleft()
      if first is None and self.last is not None and stamp > self.last:
        first = stamp
    if self.last is not None:
      self.step_seconds.append((now - self.last) / steps)
      if steps == 1 and self.stamped:
        self.input_seconds.append(0.0 if first is None else first - self.last)
    self.last = now

  def summary(self) -> Optional[step_times.TaskSteps]:
    """This task's row of step times and input waits (None outside a launch)."""
    if self.stem is None:
      return None
    return step_times.summarize(task_name(os.path.basename(self.stem)), self.steps,
                                self.step_seconds, self.input_seconds)

  def write_steps(self, now: float, publish: bool = True) -> None:
    """Writes `summary()` beside the progress file, whole (a reader never sees half).

    `publish`: and into the coordination service, where this task publishes.
    """
    self.next_write = now + step_times.WRITE_SECONDS
    if self.fd is None or self.stem is None:
      return
    path = self.stem + step_times.STEPS_SUFFIX
    text = step_times.to_text(self.summary())
    try:
      with open(path + ".new", "w", encoding="utf-8") as f:
        f.write(text)
      os.replace(path + ".new", path)
    except OSError:
      pass  # The launcher removed its directory: the job is ending.
    if publish and self.publishing and not self.chief:  # The chief reads, from the others.
      if self.publisher is None:
        self.publisher = _Publisher(STEPS_KEY.format(task=task_name(os.path.basename(self.stem))))
      self.publisher.offer(text)


  def _profile(self) -> None:
    """Starts TensorFlow's profiler before step `first`, stops it after step `last`."""
    first, last, log_dir = self.profile
    tf = sys.modules.get("tensorflow")
    if tf is None:  # Steps before TensorFlow: nothing to trace yet.
      return
    if not self.profiling and first - 1 <= self.steps < last:
      tf.profiler.experimental.start(log_dir)
      self.profiling = True
    elif self.profiling and self.steps >= last:
      tf.profiler.experimental.stop()
      self.profiling = False
      self.profile = None  # Once.


class _Publisher:
  """Puts this task's newest row in the coordination service, from a thread of its own.

  A publish takes under a millisecond, but TensorFlow gives the store's insert
  and delete no deadline: with the service's leader gone, the training thread
  would wait on them instead of failing in its collective.
  """

  def __init__(self, key: str):
    self.key = key
    self.lock = threading.Lock()
    self.text: Optional[str] = None  # The newest row not yet published.
    self.ready = threading.Event()
    threading.Thread(target=self._run, name="tfdist-steps-publisher", daemon=True).start()

  def offer(self, text: str) -> None:
    with self.lock:
      self.text = text
    self.ready.set()

  def _run(self) -> None:
    from tfdist.internals import tensorflow as tf_internals  # TensorFlow is imported by now.
    while True:
      self.ready.wait()
      self.ready.clear()
      with self.lock:
        text, self.text = self.text, None
      if text is None:
        continue
      try:
        tf_internals.publish(self.key, text)
      except Exception as error:  # pylint: disable=broad-except  A report never stops training.
        logger.warning("tfdist: this task's step times no longer reach the chief (TensorFlow's "
                       "coordination service refused them): %r", error)
        return


_reporter = _Reporter()


class _Status:
  """The status lines of one `fit`: at most one every `seconds` while an epoch trains.

  `epochs` and `steps` (a step per epoch) as Keras's `params` give them; None:
  not known. Fed the time of each batch's end, so that it reads no clock itself.
  """

  def __init__(self, task: str, seconds: float, epochs: Optional[int], steps: Optional[int]):
    self.task, self.seconds, self.epochs, self.steps = task, seconds, epochs, steps
    self.lock = threading.Lock()  # Keras 3 may end batches in several threads at once.
    self.epoch = 0
    self.step = 0  # Steps done in this epoch.
    self.due = math.inf  # When the next line may be written.
    # (time, step) the speed is measured from: the last line, else the epoch's first step
    # (which may compile), so that a first line measures `seconds` of steps.
    self.mark: Optional[Tuple[float, int]] = None
    self.drawing = False  # Keras's bar draws a line in place on stdout (verbose=1).

  def epoch_begins(self, epoch: int) -> None:
    with self.lock:
      self.epoch, self.step, self.mark, self.due = epoch, 0, None, math.inf

  def batch_end(self, batch: int, logs: Optional[Mapping[str, Any]], now: float) -> Optional[str]:
    """The line to write after batch `batch` (from 0) of this epoch, ended at `now`; else None."""
    with self.lock:
      self.step = step = max(self.step, batch + 1)
      if self.mark is None:
        self.mark, self.due = (now, step), now + self.seconds
        return None
      if now < self.due:
        return None
      (then, before), self.mark, self.due = self.mark, (now, step), now + self.seconds
    rate = (step - before) / (now - then) if now > then and step > before else None
    return self.line(step, rate, logs)

  def line(self, step: int, rate: Optional[float], logs: Optional[Mapping[str, Any]]) -> str:
    """e.g. 'worker:1 epoch 1/3, step 120/256, 6.0 steps/s, loss 0.4312, about 23s left in
    this epoch'."""
    parts = [f"{self.task} epoch {self.epoch + 1}" + (f"/{self.epochs}" if self.epochs else ""),
             f"step {step}" + (f"/{self.steps}" if self.steps else "")]
    if rate:
      parts.append(f"{rate:.1f} steps/s" if rate >= 1 else f"{1 / rate:.1f}s a step")
    loss = _number((logs or {}).get("loss"))  # tf_keras's is a tensor, fetched only here.
    if loss is not None:
      parts.append(f"loss {loss:.4f}" if abs(loss) >= 1e-3 or loss == 0 else f"loss {loss:.4e}")
    if rate and self.steps and step < self.steps:
      parts.append(f"about {output.duration((self.steps - step) / rate)} left in this epoch")
    return ", ".join(parts)


def _number(value) -> Optional[float]:
  """`value` (a float, a NumPy or TensorFlow scalar) as a float; None for anything else."""
  if value is None:
    return None
  try:
    return float(value)
  except Exception:  # pylint: disable=broad-except  A parameter server's remote value: no loss.
    return None


def _status(params: Optional[Mapping[str, Any]]) -> Optional[_Status]:
  """The status lines of a `fit` with Keras's `params`; None where it shows none."""
  params = params or {}
  if _reporter.task is None or not _reporter.status_seconds > 0 or not params.get("verbose", 1):
    return None
  status = _Status(_reporter.task, _reporter.status_seconds, params.get("epochs"),
                   params.get("steps"))
  status.drawing = params.get("verbose", 1) in (1, "auto")  # Keras 3's "auto" draws the bar.
  return status


def _end_keras_line() -> None:
  """Ends the line Keras's bar draws in place on stdout, so that the status line starts
  its own, not after the bar's text: in a pipe (the launcher's, a pod's log) the two would
  read as one line. The bar draws its next state on the next line."""
  try:
    sys.stdout.write("\n")
    sys.stdout.flush()
  except Exception:  # pylint: disable=broad-except  A closed or replaced stdout: no bar either.
    pass


def status_seconds(environ: Mapping[str, str]) -> float:
  """Seconds between status lines as `TFDIST_STATUS_SECONDS` asks (0: none); a value that is
  no number of seconds >= 0 is told, and the default kept: a status line never stops a job."""
  text = environ.get(STATUS_SECONDS_ENV, "")
  if text == "":
    return STATUS_SECONDS
  try:
    seconds = float(text)
  except ValueError:
    seconds = math.nan
  if not seconds >= 0:
    logger.warning("tfdist: `%s` must be a number of seconds >= 0 (0: no status lines); this "
                   "task writes one every %gs. Received: %s=%r", STATUS_SECONDS_ENV,
                   STATUS_SECONDS, STATUS_SECONDS_ENV, text)
    return STATUS_SECONDS
  return seconds


def parse_steps(text: str) -> Tuple[int, int]:
  """(first, last) of a step range such as '100-120' (steps count from 1).

  Raises:
    ValueError: not FIRST-LAST with 1 <= FIRST <= LAST.
  """
  first, _, last = str(text).partition("-")
  try:
    first_step, last_step = int(first), int(last or first)
  except ValueError:
    first_step = last_step = 0
  if not 1 <= first_step <= last_step:
    raise ValueError(f"`profile` must be the steps to trace as FIRST-LAST, e.g. 100-120 "
                     f"(steps count from 1). Received: {text!r}")
  return first_step, last_step
_stacks_file = None  # Kept open: faulthandler writes to its descriptor.


def step_done(steps: int = 1) -> None:
  """Tells the launcher's watchdog that `steps` training steps just finished.

  One call per step (or per `steps` steps) of a custom training loop; Keras
  `fit` and `tfdist.training.loop` call it themselves. Cheap: one small write
  to a local file under a launch, nothing else outside one.

  Example:

      >>> import tfdist
      >>> tfdist.training.step_done()
  """
  _reporter.report(steps, STEP)


def boundary() -> None:
  """Tells the watchdog that the next step may be slow (fit starts, an epoch begins)."""
  _reporter.report(0, BOUNDARY)


def phase(name: str) -> None:
  """Tells the watchdog where this task is before training (BUILD, CHECK): each call is progress."""
  _reporter.report(0, name)


_training_begins = []  # Callables run as a Keras `fit` begins training (`when_training_begins`).


def when_training_begins(function) -> None:
  """Calls `function()` each time a `fit` of a launched task begins training (once its model,
  optimizer and metrics are built, before its first step). Idempotent per function."""
  if function not in _training_begins:
    _training_begins.append(function)


def training_begins() -> None:
  """A `fit` begins: the next step may compile; what waits for this moment is told."""
  boundary()
  for function in _training_begins:
    try:
      function()
    except Exception as error:  # pylint: disable=broad-except  A report never stops training.
      logger.warning("tfdist: %r failed as training began: %r", function, error)


def epoch_end() -> None:
  """Writes this task's step times now; the chief names a straggler, in a thread of its own.

  Keras `fit` and `tfdist.training.loop` call it at each epoch's end. The chief
  waits for the other tasks' rows of this epoch (`_rows_of_these_steps`) beside
  training, not in its way; one wait at a time (an epoch that ends while the
  last one's still waits names no one).
  """
  global _naming
  try:
    with _reporter.lock:
      _reporter.write_steps(time.monotonic())
      steps = _reporter.steps
    if not _reporter.chief or _reporter.stem is None:
      return
    if _naming is not None and _naming.is_alive():
      return
    _naming = threading.Thread(target=_name_straggler, args=(steps,), daemon=True,
                               name="tfdist-straggler")
    _naming.start()
  except Exception as error:  # pylint: disable=broad-except  A report never stops training.
    logger.warning("tfdist: the step times of this epoch were not summarized: %r", error)


_naming: Optional[threading.Thread] = None  # The chief's wait for this epoch's rows, if any.


def _name_straggler(steps: int) -> None:
  try:
    line = step_times.straggler(_rows_of_these_steps(steps))
    if line:
      logger.warning("tfdist: %s", line)
  except Exception as error:  # pylint: disable=broad-except  A report never stops training.
    logger.warning("tfdist: the step times of this epoch were not summarized: %r", error)


def _named(timeout: float) -> None:
  """Waits, at most `timeout` seconds, for the chief's last straggler line."""
  if _naming is not None:
    _naming.join(timeout)


def _rows_in_folders() -> list:
  """The rows in this task's directory, and the others' in the shared folder."""
  rows = step_times.read(os.path.dirname(_reporter.stem))
  if _reporter.shared:  # A task's own directory holds its newest row.
    own = {row.task for row in rows}
    rows += [row for row in step_times.read(_reporter.shared) if row.task not in own]
  return rows


def _rows_of_these_steps(steps: int) -> list:
  """Every task's row of `steps` steps: the tasks that have run the steps the chief has.

  In a synchronous job each task ends the epoch's last step with the chief and
  writes its row then: this waits for those rows, at most ROWS_WAIT_SECONDS.
  A row of other steps is left out: an earlier one (its first steps' times) or
  the row of a task whose steps wait for no one's (it is behind, has ended, or
  trained something else meanwhile). Its times cover other steps than the
  chief's, and named a task that was not slow. The launcher's summary at the
  job's end compares every task's whole row.
  """
  deadline = time.monotonic() + ROWS_WAIT_SECONDS
  while True:
    rows = _rows_in_folders()
    if _reporter.publishing:
      own = {row.task for row in rows}
      rows += [row for row in _published_rows(_reporter.peers) if row.task not in own]
    if all(not 0 < row.steps < steps for row in rows) or time.monotonic() >= deadline:
      return [row for row in rows if row.steps == steps]
    time.sleep(0.05)


def _stampable(dataset, strategy) -> bool:
  """Whether `dataset`, read by `strategy`, can take the stamp: a `tf.data.Dataset` read here.

  Not under a parameter-server strategy: Keras sends a dataset's graph to the
  workers, where a `tf.numpy_function` of this process cannot run.
  """
  tf = sys.modules.get("tensorflow")
  if tf is None or not isinstance(dataset, tf.data.Dataset):
    return False
  remote = tuple(getattr(module, "ParameterServerStrategy", None) for module in (
      tf.distribute, tf.distribute.experimental, tf.compat.v1.distribute.experimental))
  return not isinstance(strategy, tuple(c for c in remote if isinstance(c, type)))


def stamped_input(dataset, strategy=None):
  """`dataset` with a last step that notes when each element leaves it, for the input wait.

  Anything that is no `tf.data.Dataset`, a dataset read by a parameter-server
  `strategy` (its workers run the dataset's graph, not this process), outside
  a launch or under `TFDIST_INPUT_WAIT=0`, comes back as it is. The elements
  are unchanged; the step is a `tf.numpy_function` named INPUT_STAMP
  (tfdist.data.replay knows it replays). A dataset that reads from the
  tf.data service gets the stamp after its reading step, in this process.
  """
  if _reporter.fd is None or not _reporter.stamping or not _stampable(dataset, strategy):
    return dataset
  tf = sys.modules["tensorflow"]
  stamps = _reporter.stamps
  _reporter.stamped = True
  spec = dataset.element_spec
  one_tuple = type(spec) is tuple and len(spec) == 1  # pylint: disable=unidiomatic-typecheck

  def stamp():
    stamps.append(time.monotonic())
    return 0.0

  def passed(*parts):
    done = tf.numpy_function(stamp, [], tf.float64, name=INPUT_STAMP)
    with tf.control_dependencies([done]):
      parts = tf.nest.map_structure(tf.identity, parts)
    return parts if len(parts) > 1 or one_tuple else parts[0]

  return dataset.map(passed)


def training_end() -> None:
  """Tells the watchdog that this task's training is over: a slow exit is no stall.

  A profile still recording (training ended inside its steps) is written now, and
  the chief's straggler line of the last epoch is waited for.
  """
  _reporter.report(0, END)
  _named(ROWS_WAIT_SECONDS + READ_ROWS_SECONDS)
  if _reporter.profiling:
    sys.modules["tensorflow"].profiler.experimental.stop()
    _reporter.profiling, _reporter.profile = False, None


def _published_rows(tasks) -> list:
  """The rows `tasks` published in the coordination service: each that reads as its own."""
  from tfdist.internals import tensorflow as tf_internals  # TensorFlow is imported by now.
  rows = []
  deadline = time.monotonic() + READ_ROWS_SECONDS
  for task in tasks:
    if time.monotonic() >= deadline:
      break  # A job of many tasks that published nothing yet: the next epoch reads them.
    text = tf_internals.published(STEPS_KEY.format(task=task), READ_ROW_MS)
    rows += step_times.rows_of([text] if text else [], task)
  return rows


def steps_done() -> int:
  """Steps reported in this process so far."""
  return _reporter.steps


def install(directory: str, task_type: str, task_index: int, *, chief: bool = False,
            status_every: float = STATUS_SECONDS) -> None:
  """Reports this process's progress into `directory`, and its stacks on SIGUSR1.

  `chief`: this task names a markedly slower task at each epoch's end (`epoch_end`).
  `status_every`: seconds between the status lines of a Keras `fit` (0: none).
  """
  global _stacks_file
  stem = os.path.join(directory, file_name(f"{task_type}:{task_index}"))
  _reporter.stem, _reporter.chief = stem, chief
  _reporter.task, _reporter.status_seconds = f"{task_type}:{task_index}", status_every
  # Opened by this task, not inherited: a restarted task starts from 0 steps.
  _reporter.fd = os.open(stem + PROGRESS_SUFFIX, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
  _stacks_file = open(stem + STACKS_SUFFIX, "w", encoding="utf-8")
  faulthandler.register(STACKS_SIGNAL, file=_stacks_file, all_threads=True, chain=False)
  _reporter.report(0, STARTED)  # Pid first: the launcher can ask for stacks from now on.
  # A process on its way out (TensorFlow's teardown can take seconds) is not stalled.
  atexit.register(training_end)


def install_from_env(environ=None) -> bool:
  """`install` when the launcher asked for it (`TFDIST_PROGRESS_DIR` and a TF_CONFIG task),
  and the profile of `TFDIST_PROFILE`'s steps into `TFDIST_PROFILE_DIR`/<task>; the status
  lines of its Keras `fit`s every `TFDIST_STATUS_SECONDS`.

  Never raises: a task whose directory is gone trains unwatched. Returns whether
  anything needs the steps reported.
  """
  environ = os.environ if environ is None else environ
  directory = environ.get(PROGRESS_DIR_ENV)
  try:
    tf_config = json.loads(environ.get("TF_CONFIG") or "{}")
    task = tf_config.get("task") or {}
    stem = file_name(f"{task['type']}:{int(task['index'])}")
    # TensorFlow's chief: the chief task, else worker 0 of a cluster without one.
    chief = task["type"] == "chief" or (task["type"] == "worker" and int(task["index"]) == 0
                                        and "chief" not in (tf_config.get("cluster") or {}))
  except (ValueError, KeyError, TypeError, AttributeError):
    return False
  _reporter.stamping = environ.get(INPUT_WAIT_ENV, "1") != "0"
  _reporter.shared = environ.get(STEPS_SHARED_ENV) or None
  _reporter.peers = _peers(tf_config, f"{task['type']}:{int(task['index'])}")
  # Under parameter servers only the chief steps: there is no other row to read.
  _reporter.publishing = environ.get(STEPS_PUBLISHED_ENV) == "1" and bool(_reporter.peers)
  if environ.get(PROFILE_ENV) and environ.get(PROFILE_DIR_ENV):
    try:
      first, last = parse_steps(environ[PROFILE_ENV])
      _reporter.profile = (first, last, os.path.join(environ[PROFILE_DIR_ENV], stem))
    except ValueError:
      pass
    else:
      # TF 2.21's profiler aborts a multi-worker task whose tf.data input runs a Python
      # function when it exports (docs/known_issues.md): the stamp is one. The profile
      # measures the traced steps' input wait instead.
      if _reporter.stamping:
        logger.info("tfdist: fit's input wait is not measured in this task: --profile "
                    "traces it, and TensorFlow's profiler cannot run beside the input's "
                    "time stamp (a Python function); the profile gives the traced steps'")
      _reporter.stamping = False
  if directory:
    try:
      install(directory, task["type"], int(task["index"]), chief=chief,
              status_every=status_seconds(environ))
    except OSError:
      directory = None
  if environ is os.environ:
    # This process reports for the task: a Python process it starts (a helper
    # script, a multiprocessing worker) must not take the task's files over.
    for name in (PROGRESS_DIR_ENV, PROFILE_ENV, PROFILE_DIR_ENV, STEPS_SHARED_ENV,
                 STEPS_PUBLISHED_ENV):
      os.environ.pop(name, None)
  return bool(directory) or _reporter.profile is not None


def _peers(tf_config, own: str) -> Tuple[str, ...]:
  """The other tasks of a synchronous job that step ("chief" and "worker"); none under PS."""
  cluster = tf_config.get("cluster") or {}
  if not isinstance(cluster, dict) or cluster.get("ps"):
    return ()
  tasks = []
  try:
    for task_type in ("chief", "worker"):
      addresses = cluster.get(task_type) or []
      indices = addresses if isinstance(addresses, dict) else range(len(addresses))
      tasks += [f"{task_type}:{int(index)}" for index in indices]
  except (TypeError, ValueError):  # Not a cluster TensorFlow would take: it fails there.
    return ()
  return tuple(task for task in tasks if task != own)


def keras_callbacks(base: type) -> list:
  """The callbacks that report a Keras `fit`'s progress, subclassing `base` (its Callback).

  For either Keras: `base` is `tf_keras.callbacks.Callback` or
  `keras.callbacks.Callback`; the task site adds them to every `fit`.
  """

  class StepReporter(base):
    """Reports each training step, and the boundaries after which a step may compile; logs
    the status line of a running epoch every STATUS_SECONDS."""

    async_safe = True  # Keras 3 may call it from its callback threads: it counts, under locks.
    status: Optional[_Status] = None

    def on_train_begin(self, logs=None):
      # Both Kerases set `params` (verbose, epochs, steps) before fit begins.
      self.status = _status(getattr(self, "params", None))
      training_begins()

    def on_epoch_begin(self, epoch, logs=None):
      boundary()
      if self.status is not None:
        self.status.epoch_begins(epoch)

    def on_epoch_end(self, epoch, logs=None):
      epoch_end()

    def on_test_begin(self, logs=None):
      boundary()

    def on_train_batch_end(self, batch, logs=None):
      now = _reporter.report(1, STEP)  # The batch's one clock read.
      if self.status is not None:
        line = self.status.batch_end(batch, logs, now)
        # INFO: on the task's stdout, flushed at once (tfdist.output), unless quietened.
        if line and logger.isEnabledFor(logging.INFO):
          if self.status.drawing:
            _end_keras_line()
          logger.info("tfdist: %s", line)

    def on_train_end(self, logs=None):
      training_end()

    def on_test_batch_end(self, batch, logs=None):
      _reporter.report(0, STEP)  # Evaluation moves too.

  return [StepReporter()]
