"""Running subprocesses in tests: always with a timeout, never leaving children behind."""

import contextlib
import json
import logging
import os
import re
import resource
import signal
import subprocess
import sys
import time
from typing import Iterator, Mapping, Optional, Sequence, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(REPO, "tests", "scripts")


def _environment(env: Optional[Mapping[str, str]]) -> dict:
  full_env = dict(os.environ)
  full_env.pop("TF_CONFIG", None)
  full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  # A Python process that gets SIGABRT first writes every thread's stack (see `run`).
  full_env["PYTHONFAULTHANDLER"] = "1"
  full_env.update(env or {})
  return full_env


# A time as tfdist.output.duration writes it: "23s", "14 min" or "2 h 05 min".
DURATION = r"(?:\d+s|\d+ min|\d+ h \d\d min)"


def _kill_group(process: subprocess.Popen) -> None:
  try:
    os.killpg(process.pid, signal.SIGKILL)  # Grandchildren too.
  except ProcessLookupError:
    pass


# How long the processes of a timed-out command get to write their stacks.
STACKS_SECONDS = 5
# SIGABRT writes a core file where the limit allows: none from the tests' children.
resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))


def _group(pgid: int) -> list:
  """The pids of process group `pgid`, children before their parents (from /proc: the parent
  and the group are fields 4 and 5 of each process's stat)."""
  parents = {}
  for entry in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{entry}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
      continue
    if int(fields[2]) == pgid:
      parents[int(entry)] = int(fields[1])

  def depth(pid):
    steps = 0
    while parents.get(pid) in parents:
      pid, steps = parents[pid], steps + 1
    return steps
  return sorted(parents, key=lambda pid: (-depth(pid), pid))


def _abort_group(process: subprocess.Popen) -> None:
  """SIGABRT to each process of the group in turn, then SIGKILL: each writes its stacks first.

  With PYTHONFAULTHANDLER set, faulthandler writes every thread's Python stack
  to stderr on SIGABRT from its own C handler, so a thread blocked in
  TensorFlow's C++ cannot stop it; a test that times out then shows where it
  waited instead of the last lines it printed. One process at a time, so that
  their stacks do not interleave in the output they share; children first, since a
  task that dies with its parent (`tfdist task`, the launchers) is gone once it is.
  """
  for pid in _group(process.pid):
    try:
      os.kill(pid, signal.SIGABRT)
    except ProcessLookupError:
      continue
    time.sleep(0.5)
  try:
    process.wait(timeout=STACKS_SECONDS)
  except subprocess.TimeoutExpired:
    pass
  _kill_group(process)


def run(command: Sequence[str], *, timeout: float, env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None) -> subprocess.CompletedProcess:
  """Runs `command` in its own process group; on timeout, its stacks, then the group killed."""
  with spawned(command, env=env, cwd=cwd) as process:
    try:
      output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
      _abort_group(process)
      output, _ = process.communicate()
      raise AssertionError(f"timed out after {timeout}s: {command}\n{output[-8000:]}") from None
  return subprocess.CompletedProcess(command, process.returncode, output, None)


@contextlib.contextmanager
def spawned(command: Sequence[str], *, env: Optional[Mapping[str, str]] = None,
            cwd: Optional[str] = None) -> Iterator[subprocess.Popen]:
  """A process in its own group (in `cwd`, default the checkout), for tests that signal it.

  On leaving the block, the process and all its children are killed.
  """
  process = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=_environment(env), cwd=cwd or REPO,
                             start_new_session=True, text=True, errors="replace")
  try:
    yield process
  finally:
    _kill_group(process)


def listening(pids=None) -> set:
  """(address, port) of each TCP socket the processes `pids` (None: any) listen on, from /proc."""
  import ipaddress  # pylint: disable=g-import-not-at-top
  inodes = set()
  for pid in pids or ():
    for fd in os.listdir(f"/proc/{pid}/fd"):
      try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
      except OSError:
        continue
      if target.startswith("socket:["):
        inodes.add(target[8:-1])
  found = set()
  for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    with open(table) as f:
      for row in f.read().splitlines()[1:]:
        fields = row.split()
        if fields[3] == "0A" and (pids is None or fields[9] in inodes):  # 0A: LISTEN.
          address, port = fields[1].rsplit(":", 1)
          # The address is in 32-bit words, each in the host's (little-endian) order.
          packed = b"".join(bytes.fromhex(address[i:i + 8])[::-1]
                            for i in range(0, len(address), 8))
          found.add((str(ipaddress.ip_address(packed)), int(port, 16)))
  return found


def wait_for_files(directory, count: int, seconds: float = 120) -> None:
  """Waits until `directory` holds `count` files (tasks write their pid there)."""
  deadline = time.monotonic() + seconds
  while len(os.listdir(directory)) < count and time.monotonic() < deadline:
    time.sleep(0.2)
  assert len(os.listdir(directory)) == count, os.listdir(directory)


def python(*args: str) -> list:
  return [sys.executable, *args]


def tfdist_cli(*args: str) -> list:
  return [sys.executable, "-m", "tfdist", *args]


def without_tf_keras() -> dict:
  """The environment of a process (and its children) in which tf_keras is not installed.

  Keras 3 alone, as TensorFlow 2.16 and later install it: tests/site_without_tf_keras, after
  tests/site (whose sitecustomize hands over to it) on PYTHONPATH.
  """
  site = os.path.join(REPO, "tests", "site_without_tf_keras")
  return {"PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), site) if p)}


def launched_results(script: str, *args: str, workers: int = 2, launch_flags: Sequence[str] = (),
                     timeout: float = 300) -> list:
  """Runs `script` once per worker under `tfdist launch`; its RESULT lines as (worker, JSON)."""
  result = run(tfdist_cli("launch", f"--workers={workers}", *launch_flags, "--",
                          *python(os.path.join(SCRIPTS, script), *args)), timeout=timeout)
  assert result.returncode == 0, result.stdout[-3000:]
  return [(int(worker), json.loads(line))
          for worker, line in re.findall(r"\[worker:(\d+)\] RESULT (.*)", result.stdout)]


def _parent(pid: int) -> int:
  with open(f"/proc/{pid}/stat") as f:
    return int(f.read().rsplit(")", 1)[1].split()[1])


def task_pid(root: int, task_type: str, index: int, seconds: float = 120) -> int:
  """The pid of a descendant of `root` whose TF_CONFIG names the given task."""
  want = f'"task": {{"type": "{task_type}", "index": {index}}}'
  return _descendant(root, "environ", want, seconds)


def command_pid(root: int, needle: str, seconds: float = 120) -> int:
  """The pid of a descendant of `root` whose command line contains `needle`."""
  return _descendant(root, "cmdline", needle.replace(" ", "\0"), seconds)


def _descendant(root: int, proc_file: str, want: str, seconds: float) -> int:
  """The first descendant of `root` whose /proc/PID/`proc_file` contains `want`."""
  deadline = time.monotonic() + seconds
  while time.monotonic() < deadline:
    for name in filter(str.isdigit, os.listdir("/proc")):
      pid = int(name)
      try:
        with open(f"/proc/{pid}/{proc_file}", "rb") as f:
          if want.encode() not in f.read():
            continue
        ancestor = pid
        while ancestor > 1 and ancestor != root:
          ancestor = _parent(ancestor)
      except (OSError, ValueError, IndexError):
        continue  # Gone meanwhile.
      if ancestor == root:
        return pid
    time.sleep(0.2)
  raise AssertionError(f"no process with {want!r} in its {proc_file} under pid {root}")


def signal_when(command: Sequence[str], pattern: str, signum: int, *,
                task: Optional[Tuple[str, int]] = None,
                process: Optional[Sequence[str]] = None, timeout: float = 300):
  """Runs `command`; at the first line matching `pattern` (re.search), signals it.

  The signal goes to the command itself, to one task of the cluster it
  started (`task=("worker", 1)`), or to the first of its descendants whose
  command line holds the words of `process` (e.g. ("data_service",
  "--role=worker")). Returns (output up to the match, the rest, exit code);
  everything is killed on the way out.
  """
  with spawned(command) as parent:
    lines = []
    for line in parent.stdout:
      lines.append(line)
      if re.search(pattern, line):
        if task is not None:
          pid = task_pid(parent.pid, *task)
        elif process is not None:
          pid = command_pid(parent.pid, " ".join(process))
        else:
          pid = parent.pid
        os.kill(pid, signum)
        break
    return "".join(lines), parent.communicate(timeout=timeout)[0], parent.returncode


def read_once(results, epoch):
  """(examples read in `epoch` by both trainers, distinct ones, whether each trainer read some)."""
  a, b = results[epoch, 0], results[epoch, 1]
  bits = int(a["bits"], 16) | int(b["bits"], 16)
  return a["count"] + b["count"], bin(bits).count("1"), bool(a["count"] and b["count"])


# --- the strategy tests' model: the same user code under every strategy ---

KERASES = ["keras3", "tf_keras"]  # The tests' parameter for "under each Keras".


def keras_of(flavour):
  """The Keras package of a KERASES entry: Keras 3, or tf_keras (tfdist.keras)."""
  if flavour == "keras3":
    import keras  # pylint: disable=g-import-not-at-top
    return keras
  import tfdist  # pylint: disable=g-import-not-at-top
  return tfdist.keras


def interrupt(epoch, batch=None):
  """A callback that stops fit at the start of `epoch` (an error, as a crash) or SIGTERMs it
  at `batch` of that epoch."""
  from tfdist import keras  # pylint: disable=g-import-not-at-top

  class Interrupt(keras.callbacks.Callback):

    def __init__(self):
      super().__init__()
      self.running = None

    def on_epoch_begin(self, epoch_now, logs=None):
      self.running = epoch_now
      if epoch_now == epoch and batch is None:
        raise RuntimeError("interrupted")

    def on_train_batch_begin(self, batch_now, logs=None):
      if (self.running, batch_now) == (epoch, batch):
        os.kill(os.getpid(), signal.SIGTERM)

  return Interrupt()


def let_go(excinfo):
  """Frees what an interrupted `fit` left in `excinfo`'s traceback, now.

  Its frames hold the fit's tf.data iterators, in reference cycles. Freed at the test's
  end by the garbage collector, each waits for its autotune thread, up to the iterator's
  age (docs/suite-time.md; 20-117 s of teardown in one CI run, docs/suite-time-runs.md).
  Freed while young, they cost about nothing.

  Keras re-raises with its own frames filtered out of the traceback, but those frames
  (`fit`'s, holding its iterator) live on behind the ones left: each frame from each
  traceback entry up to the test is cleared, through `f_back` (an entry may be another
  thread's: a replica's). The test's own frame still runs, and stops the walk. A function
  frame whose `f_locals` something read (AutoGraph does, for every frame on the stack) keeps
  a copy of its locals that `frame.clear()` leaves on Python 3.11.7 (python/cpython#113939,
  tests/internals/test_frames.py); that copy is emptied too.
  """
  import gc  # pylint: disable=g-import-not-at-top
  import inspect  # pylint: disable=g-import-not-at-top
  seen = set()
  tb = excinfo.tb
  while tb is not None:
    frame = tb.tb_frame
    while frame is not None and id(frame) not in seen:
      seen.add(id(frame))
      try:
        frame.clear()
      except RuntimeError:  # A frame still running: the test's, and those that called it.
        break
      # A module's or class body's f_locals is its namespace, not a copy: left alone.
      if frame.f_code.co_flags & inspect.CO_OPTIMIZED and isinstance(frame.f_locals, dict):
        frame.f_locals.clear()
      frame = frame.f_back
    tb = tb.tb_next
  gc.collect()


def regression_data(n=256):
  """A small linear regression: (x, y), the same every call."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = rng.random((n, 4)).astype("float32")
  y = x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")
  return x, y


def regression_batches(n=100, batch_size=32):
  """regression_data(n) as a tf.data.Dataset of batches (100 by 32: the last one has 4)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.data.Dataset.from_tensor_slices(regression_data(n)).batch(batch_size)


def build_and_fit(strategy, epochs=5):
  """The user's Keras code, identical for every strategy: (model, epoch losses)."""
  from tfdist import keras  # pylint: disable=g-import-not-at-top
  x, y = regression_data()
  keras.utils.set_random_seed(1)
  with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
  history = model.fit(x, y, batch_size=32, epochs=epochs, shuffle=False, verbose=0)
  return model, history.history["loss"]


@contextlib.contextmanager
def tfdist_messages(level=logging.INFO):
  """The messages of the tfdist logger meanwhile, at `level` and above: a list that grows."""
  logger = logging.getLogger("tfdist")
  lines, handler, previous = [], logging.Handler(), logger.level
  handler.emit = lambda record: lines.append(record.getMessage())
  logger.setLevel(level)
  logger.addHandler(handler)
  try:
    yield lines
  finally:
    logger.removeHandler(handler)
    logger.setLevel(previous)
