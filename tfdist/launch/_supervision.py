"""Supervising the processes of a local cluster: start, prefix output, stop, restart.

Each task (and each tf.data service server, `data_servers`) is a process in
its own process group that dies with the launcher, however the launcher dies.
Its lines are prefixed (`[worker:1] ...`) as they come; of a line it redraws
with `\\r` (a progress bar), one every REDRAW_SECONDS. `Cluster.run` waits
for the tasks that must finish and applies the restart rules: without ps
tasks every task restarts together (collectives need all of them); a
parameter-server worker restarts alone, or the others go on without it.
Stopping is SIGTERM to every process group, then SIGKILL after the grace
period.
"""

import collections
import contextlib
import ctypes
import dataclasses
import math
import os
import re
import select
import signal
import subprocess
import threading
import time
from typing import Callable, Deque, Dict, List, Mapping, Optional

from tfdist import cluster as cluster_lib
from tfdist.task import progress
from tfdist.cluster import _grace as grace
from tfdist.launch import _data_servers as data_servers
from tfdist.launch._launcher import LaunchError
from tfdist.launch import watchdog as watchdog_lib

_TAIL_LINES = 20
# Exit code for a cluster stopped by the overall timeout, as timeout(1) uses.
TIMEOUT_EXIT_CODE = 124
# Exit code for a job ended by the stall watchdog.
STALL_EXIT_CODE = watchdog_lib.STALL_EXIT_CODE
# A task's line redrawn with `\r` is passed on at most this often (Keras's bar redraws
# at every step), and always its last state before its `\n`.
REDRAW_SECONDS = 5.0
_READ_BYTES = 65536
_LINE_END = re.compile(rb"([\r\n])")


class CannotStart(LaunchError):
  """A task's command could not start: not found, or not executable."""

  exit_code = 127  # As shells exit for a command they cannot find.


# Linux's prctl(PR_SET_PDEATHSIG): the kernel signals the child when its parent
# dies, even by SIGKILL, which no handler of the launcher's can see. Resolved
# here, not in the child: between fork and exec nothing may load a library.
_PR_SET_PDEATHSIG = 1
try:
  _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # Not Linux: tasks outlive a killed launcher.
  _prctl = None


def die_with_parent(launcher_pid: int):
  """A preexec_fn: the child gets SIGKILL when `launcher_pid`, its parent, dies, however it dies."""
  def preexec():
    if _prctl is not None:
      _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != launcher_pid:  # The launcher died before prctl took effect.
      os._exit(1)
  return preexec


@dataclasses.dataclass
class Supervised:
  """One process of a launch: a task of the cluster, or a tf.data service server."""

  task: cluster_lib.TaskSpec
  process: subprocess.Popen
  tail: Deque[str]
  reader: threading.Thread
  command: List[str]
  server: bool  # A tf.data service server: never has to finish, restarted by its own rule.
  must_finish: bool


def must_finish(spec: cluster_lib.ClusterSpec, task: cluster_lib.TaskSpec) -> bool:
  """Whether the cluster is done only when `task` exits.

  With ps tasks (parameter-server training) workers and ps only serve, and the
  chief's exit ends the job; otherwise every worker trains and must finish.
  """
  if task.type in (cluster_lib.CHIEF, cluster_lib.EVALUATOR):
    return True
  return task.type == cluster_lib.WORKER and cluster_lib.PS not in spec.jobs


def trains(spec: cluster_lib.ClusterSpec, task: cluster_lib.TaskSpec) -> bool:
  """Whether `task` trains, so that the stall watchdog waits for its steps.

  Every task the job waits for but an evaluator: not a ps task, nor a
  parameter-server worker, which serve and never step.
  """
  return must_finish(spec, task) and task.type != cluster_lib.EVALUATOR


def _survivable(spec: cluster_lib.ClusterSpec, task: cluster_lib.TaskSpec) -> bool:
  """A PSS worker may die: the coordinator reschedules its steps on the others."""
  return task.type == cluster_lib.WORKER and cluster_lib.PS in spec.jobs


def task_environment(spec: cluster_lib.ClusterSpec, task: cluster_lib.TaskSpec,
                     base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
  """The environment of one task: `base` (default os.environ) plus its TF_CONFIG."""
  env = dict(os.environ if base is None else base)
  env["TF_CONFIG"] = spec.tf_config(task.type, task.index)
  # Children print as they go, so that prefixed lines interleave in real time.
  env["PYTHONUNBUFFERED"] = "1"
  return env


_RESTART = object()


class Cluster:
  """The processes of one launch, restarted as the failures allow."""

  def __init__(self, command, spec, env, output, grace_period, data_service=None,
               stall_timeout: float = 0.0):
    self.command, self.spec, self.env, self.output = list(command), spec, env, output
    self.stall_timeout = stall_timeout  # 0: no watchdog (tfdist.launch.watchdog).
    self.watchdog: Optional[watchdog_lib.StallWatchdog] = None
    self.next_stall_check = 0.0
    self.grace_period = grace_period
    self.data_service = data_service
    self.servers: Optional[data_servers.DataServers] = None
    self.attempt = 0
    self.prefix: List[str] = []
    self.lock = threading.Lock()
    self.tasks: List[Supervised] = []

  def run(self, timeout, max_restarts) -> int:
    """Starts every task and server, applies the restart rules; the job's exit code."""
    deadline = None if timeout is None else time.monotonic() + timeout
    self.max_restarts = self.restarts_left = max_restarts
    # SIGINT and SIGTERM are only recorded, until every task is stopped: a
    # second Ctrl-C during the grace period must not cut the stop short and
    # leave task groups behind.
    self.interrupted: List[int] = []
    main_thread = threading.current_thread() is threading.main_thread()
    previous = {}
    if main_thread:
      for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, lambda signum, frame: self.interrupted.append(signum))
    try:
      with contextlib.ExitStack() as progress_folder:
        if self.stall_timeout:  # Removed at the end, also if SIGKILLed; the steps read first.
          self.watchdog = watchdog_lib.StallWatchdog(
              progress_folder.enter_context(watchdog_lib.progress_directory()),
              self.stall_timeout)
          progress_folder.callback(self.report_steps)
        return self.attempts(timeout, deadline)
    finally:
      for sig, handler in previous.items():
        signal.signal(sig, handler)

  def attempts(self, timeout: Optional[float], deadline: Optional[float]) -> int:
    """Starts every task, waits, and starts them all again while a restart is due."""
    while True:
      try:
        self.tasks = []
        if self.watchdog is not None:
          self.watchdog.reset()
        self.prepare_attempt()
        self.tasks += self.start_data_service()
        self.tasks += [self.start(task) for task in self.spec.tasks()]
        code = self.wait(timeout, deadline)
        self.attempt += 1
      finally:
        stop_all(self.tasks, self.grace_period)
      if code is not _RESTART:
        return code

  def report_steps(self) -> None:
    """Reports each task's step times from the watchdog's folder (see `watchdog.step_summary`)."""
    summary = watchdog_lib.step_summary(self.watchdog.directory)
    if summary:
      self.report(summary)

  def prepare_attempt(self) -> None:
    """Before every task starts (again): here nothing; a launcher may move the cluster."""

  def planned_restart(self) -> Optional[str]:
    """Polled while the tasks run: why to restart every task now (else None).

    Here never; a launcher that can grow the cluster back says why. The tasks
    get SIGTERM and their grace period to back up, as in any stop, and the
    restart does not count against `max_restarts`.
    """
    return None

  def start_data_service(self) -> List["Supervised"]:
    """The tf.data service's servers, as processes that never have to finish."""
    if self.data_service is None:
      return []
    self.servers = data_servers.DataServers(self.data_service, self.max_restarts)
    return [self.start(task, command) for task, command in self.servers.commands()]

  def task_env(self, task) -> Dict[str, str]:
    """The environment of `task`: its TF_CONFIG, its grace period, the tf.data service's variables."""
    env = task_environment(self.spec, task, self.env)
    # What a backup after SIGTERM must fit in (tfdist.training.checkpoints).
    env[grace.GRACE_PERIOD_ENV] = f"{self.grace_period:g}"
    if self.watchdog is not None:
      env[progress.PROGRESS_DIR_ENV] = self.watchdog.directory
    if self.servers is not None:
      env.update(self.servers.environment(self.attempt, os.getpid()))
    return env

  def server_env(self, task) -> Dict[str, str]:
    """The environment of tf.data service server `task`: no TF_CONFIG, it is no TF task."""
    del task
    env = {**self.env, "PYTHONUNBUFFERED": "1"}
    env.pop("TF_CONFIG", None)
    return env

  def moved(self, task) -> Optional[str]:
    """Why `task` cannot restart alone where the others expect it (None: it can).

    Here it always can: a local task restarts on its own port. A launcher
    whose tasks can land on another machine says so, for a task the others
    know by its address (a parameter-server worker, a tf.data dispatcher).
    """
    del task
    return None

  def start(self, task, server_command: Optional[List[str]] = None) -> "Supervised":
    """Starts `task` of the cluster, or with `server_command` a tf.data service server."""
    server = server_command is not None
    env = self.server_env(task) if server else self.task_env(task)
    command = server_command if server else self.command
    try:
      process = subprocess.Popen(
          self.prefix + command, env=env,
          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
          start_new_session=True,  # Own process group: stop its children too.
          preexec_fn=die_with_parent(os.getpid()))
    except OSError as e:
      raise CannotStart(
          f"Could not start task {task}: {e.strerror}. Check that the command "
          f"exists and is executable. Received: command={self.command!r}") from e
    tail: Deque[str] = collections.deque(maxlen=_TAIL_LINES)
    reader = threading.Thread(target=self._pump, args=(process, f"[{task}] ", tail),
                              daemon=True)
    reader.start()
    return Supervised(task, process, tail, reader, command=command, server=server,
                      must_finish=not server and must_finish(self.spec, task))

  def _pump(self, process, prefix, tail) -> None:
    read_lines(process.stdout, lambda lines: self._write(prefix, tail, lines))

  def _write(self, prefix: str, tail, lines: List[str]) -> None:
    if not lines:
      return
    tail.extend(lines)
    with self.lock:
      self.output.writelines(prefix + line + "\n" for line in lines)
      self.output.flush()

  def report(self, message: str) -> None:
    """Writes one `[tfdist launch]` line to the launch's output."""
    with self.lock:
      self.output.write(f"[tfdist launch] {message}\n")
      self.output.flush()

  def wait(self, timeout, deadline):
    """Returns the cluster's exit code, or _RESTART to start every task again."""
    while True:
      if self.interrupted:
        name = signal.Signals(self.interrupted[0]).name
        self.report(f"received {name}; stopping every task (SIGTERM, then SIGKILL after "
                    f"{self.grace_period:g}s)")
        return 128 + self.interrupted[0]
      for t in [t for t in self.tasks if t.server and t.process.poll() is not None]:
        code = self._on_server_exit(t)
        if code is not None:
          return code
      for t in [t for t in self.tasks if t.process.poll() not in (None, 0)]:
        code = self._on_failure(t)
        if code is not None:
          return code
      if all(t.process.poll() == 0 for t in self.tasks if t.must_finish):
        return 0
      code = self._check_stall()
      if code is not None:
        return code
      reason = self.planned_restart()
      if reason:
        self.report(f"{reason}; stopping every task (SIGTERM: each backs up in its "
                    f"{self.grace_period:g}s grace period) to start them again")
        return _RESTART
      if deadline is not None and time.monotonic() > deadline:
        running = [str(t.task) for t in self.tasks if t.process.poll() is None]
        self.report(f"timeout after {timeout:g}s; still running: {running}; "
                    "stopping every task")
        return TIMEOUT_EXIT_CODE
      time.sleep(0.1)

  def _check_stall(self):
    """On a stall: every task's stacks, the task to look at; _RESTART or STALL_EXIT_CODE."""
    now = time.monotonic()
    if self.watchdog is None or now < self.next_stall_check:
      return None
    self.next_stall_check = now + 1.0
    stall = self.watchdog.check()
    if stall is None:
      return None
    stacks = self.watchdog.stacks(stall.reports)
    with self.lock:
      for task, text in sorted(stacks.items()):
        self.output.write(f"[tfdist launch] {task}'s Python stacks:\n")
        self.output.writelines(f"[{task}] {line}\n" for line in text.splitlines())
      self.output.flush()
    what = (f"stalled: {watchdog_lib.describe(stall)}; "
            f"{watchdog_lib.culprit(stall, stacks)}")
    tail = "\n".join(f"  [{t.task}] {line}" for t in self.tasks if not t.server
                     for line in list(t.tail)[-3:])
    return self._restart_every_task_or_stop(what, tail, STALL_EXIT_CODE)

  def _on_server_exit(self, t: "Supervised"):
    """Handles a tf.data service server that exited: an exit code, or None to go on."""
    t.reader.join(timeout=2)
    code = t.process.returncode
    tail = "\n".join(f"  [{t.task}] {line}" for line in t.tail)
    moved = self.moved(t.task)
    if moved:  # The trainers know it by its old address: only a new start helps.
      return self._restart_every_task_or_stop(
          f"tf.data service {t.task} exited with code {code} and cannot restart: {moved}",
          tail, code or 1)
    restart, message = self.servers.after_exit(t.task, code)
    self.report(f"{message}. Its last lines:\n{tail}")
    if not restart:
      return code or 1
    stop_all([t], self.grace_period)
    self.tasks[self.tasks.index(t)] = self.start(t.task, t.command)
    return None

  def _on_failure(self, t: "Supervised"):
    """Handles a task that exited non-zero: an exit code, _RESTART, or None to go on."""
    t.reader.join(timeout=2)
    code = t.process.returncode
    tail = "\n".join(f"  [{t.task}] {line}" for line in t.tail)
    what = f"task {t.task} exited with code {code}"
    if _survivable(self.spec, t.task):
      others = [str(u.task) for u in self.tasks if u is not t
                and u.task.type == cluster_lib.WORKER and u.process.poll() is None]
      moved = self.moved(t.task)
      if moved:
        what = f"{what}, and cannot restart: {moved}"
      elif self.restarts_left > 0:
        self.restarts_left -= 1
        self.report(f"{what}; restarting it alone ({self.restarts_left} restarts left) "
                    f"while the coordinator reschedules its steps. Its last lines:\n{tail}")
        stop_all([t], self.grace_period)  # Its grandchildren too.
        self.tasks[self.tasks.index(t)] = self.start(t.task)
        return None
      if others:
        self.report(f"{what}; training goes on with {others}. Its last lines:\n{tail}")
        self.tasks.remove(t)  # Nothing more to wait for; its group is stopped here.
        stop_all([t], self.grace_period)
        return None
    return self._restart_every_task_or_stop(what, tail, code)

  def _restart_every_task_or_stop(self, what: str, tail: str, code: int):
    """_RESTART while restarts are left, else `code`; reports which, with the tail."""
    if self.restarts_left > 0:
      self.restarts_left -= 1
      self.report(f"{what}; restarting every task ({self.restarts_left} restarts left). "
                  f"Its last lines:\n{tail}")
      return _RESTART
    self.report(f"{what}; stopping the other tasks. Its last lines:\n{tail}")
    return code


class OutputLines:
  """A task's output bytes as the lines to pass on: every line that ends with `\\n`; of a line
  redrawn with `\\r`, one state every `every` seconds and the last before its `\\n`.

  Keras's bar redraws its line at every step (`\\b`s, `\\r`, the new state); in a
  pipe, a reader of lines would see it only at the epoch's end.
  """

  def __init__(self, every: float = REDRAW_SECONDS):
    self.every = every
    self.rest: List[bytes] = []  # The bytes since the last line end.
    self.held: Optional[str] = None  # The newest redrawn state not passed on.
    self.shown = -math.inf  # When a redrawn state was last passed on.
    self.redrawing = False  # The last line end was a `\r`.

  def feed(self, data: bytes, now: float) -> List[str]:
    """The lines to pass on once `data`, read at `now`, is added."""
    parts = _LINE_END.split(data)  # [text, end, text, end, ..., the rest]
    if len(parts) == 1:
      self.rest.append(data)
      return []
    lines = []
    parts[0] = b"".join(self.rest) + parts[0]
    self.rest = [parts[-1]] if parts[-1] else []
    for raw, end in zip(parts[:-1:2], parts[1::2]):
      lines += self._line(raw, end == b"\r", now)
    return lines

  def _line(self, raw: bytes, redrawn: bool, now: float) -> List[str]:
    # Children may print anything; never let a bad byte kill the launcher.
    text = raw.decode("utf-8", errors="replace")
    if not redrawn:
      after_redraw, self.redrawing = self.redrawing, False
      if after_redraw and not text:  # The line's end after its last redraw (`\r\n`).
        held, self.held = self.held, None
        return [] if held is None else [held]
      self.held = None  # This line is the newer state.
      return [text]
    self.redrawing = True
    text = text.rstrip("\b")  # The bar moves back over itself before its next `\r`.
    if not text.strip():  # Nothing drawn (a first `\r`): the state held stays.
      return []
    if now - self.shown >= self.every:
      self.shown, self.held = now, None
      return [text]
    self.held = text
    return []

  def wait(self, now: float) -> Optional[float]:
    """Seconds until a redrawn state held back is due; None: nothing held."""
    return None if self.held is None else max(0.0, self.shown + self.every - now)

  def due(self, now: float) -> List[str]:
    """The state held back, if it is due at `now`."""
    if self.held is None or now - self.shown < self.every:
      return []
    held, self.held, self.shown = self.held, None, now
    return [held]

  def close(self) -> List[str]:
    """The lines left when the output ends: the state held back, a last line without `\\n`."""
    held, self.held = self.held, None
    rest, self.rest = b"".join(self.rest), []
    text = rest.decode("utf-8", errors="replace")
    if self.redrawing:
      text = text.rstrip("\b")
      if text.strip():
        return [text]  # Drawn after the state held back: the newer.
      return [] if held is None else [held]
    return [text] if text else []  # Nothing is held after a `\n`.


def read_lines(stream, write: Callable[[List[str]], None]) -> None:
  """Reads a task's output `stream` to its end, giving `write` the lines to pass on as they come
  (`OutputLines`: a line redrawn with `\\r` too, every REDRAW_SECONDS); closes the stream.

  Raw reads, not readline: a line redrawn with `\\r` would wait for its `\\n`. The local
  launcher and each Ray node's task actor read this way.
  """
  try:
    fd = stream.fileno()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    lines = OutputLines()
    while True:
      wait = lines.wait(time.monotonic())
      if wait is not None and not poller.poll(wait * 1000):
        write(lines.due(time.monotonic()))  # A redraw held back.
        continue
      data = os.read(fd, _READ_BYTES)
      if not data:
        break
      write(lines.feed(data, time.monotonic()))
    write(lines.close())
  finally:  # Closed also on an error: a reader waits for that to know the output ended.
    stream.close()


def stop_all(tasks: List[Supervised], grace_period: float) -> None:
  """SIGTERM every task's process group, then SIGKILL what is left after `grace_period`."""
  for t in tasks:
    signal_group(t.process, signal.SIGTERM)
  deadline = time.monotonic() + grace_period
  for t in tasks:
    try:
      t.process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
      pass
  for t in tasks:
    signal_group(t.process, signal.SIGKILL)  # Also reaps grandchildren.
    t.process.wait()
    t.reader.join(timeout=2)


def signal_group(process: subprocess.Popen, sig: int) -> None:
  """Sends `sig` to the process group `process` leads (it and its children); gone is fine."""
  try:
    os.killpg(process.pid, sig)
  except (ProcessLookupError, PermissionError):
    pass
