"""Test set-up: two logical CPUs stand in for two GPUs, and no test may leak env vars."""

import gc
import importlib
import json
import logging
import os
import shutil
import sys
import tempfile

import pytest
import tensorflow as tf

import suite_cpu
import tfdist

# Every Python process the suite starts skips the garbage collection of its exit
# (tests/site/sitecustomize.py). Set before pytest-xdist starts its workers, so theirs too.
_SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")
if _SITE not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
  os.environ["PYTHONPATH"] = os.pathsep.join(
      p for p in (_SITE, os.environ.get("PYTHONPATH")) if p)

# The temporary files of every process the suite starts go to one folder, removed when the run
# ends unless it failed (then kept, and named): a process a test kills cannot remove its own
# (TensorFlow's autograph sources go at exit only) and Ray keeps its session logs, so each CI
# run left about 150 files, a few checkpoint folders and a Ray session's logs in /tmp.
SUITE_TMPDIR = "TFDIST_SUITE_TMPDIR"
# Ray's sockets are in its session folder under its temporary directory, and a Unix socket's
# path is at most 107 bytes: the longest Ray makes there, past the directory.
RAY_SOCKET_TAIL = len("/ray/session_2026-12-01_01-21-04_123456_4194304/sockets/plasma_store.10")
_UNIX_PATH_MAX = 107
_made_tmpdir = None  # The folder, in the process that made it.
_TMPDIR_KEPT = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
  # Before xdist starts its workers (at the session's start): they and every process a test
  # starts inherit it. Python's tempfile in this process keeps the machine's, and so does
  # pytest's tmp_path, which xdist's workers take from this process.
  global _made_tmpdir
  if os.environ.get(SUITE_TMPDIR):  # An xdist worker: the controller made it.
    return
  machines = tempfile.gettempdir()
  _made_tmpdir = tempfile.mkdtemp(prefix="tfd-")
  os.environ[SUITE_TMPDIR] = os.environ["TMPDIR"] = _made_tmpdir
  if len(_made_tmpdir) + RAY_SOCKET_TAIL > _UNIX_PATH_MAX:
    os.environ.setdefault("RAY_TMPDIR", machines)  # Ray's as before, rather than no Ray.


def kept_line(folder: str) -> str:
  return f"the temporary files of the processes the suite started are kept in {folder}"


def remove_suite_tmpdir(folder: str):
  """Removes the suite's temporary folder; says so if some of it is left (None: all gone)."""
  shutil.rmtree(folder, ignore_errors=True)
  if os.path.exists(folder):
    return (f"the suite's temporary folder {folder} is not removed whole (a process the suite "
            "started may still write there)")
  return None


# Must run before the TF runtime starts; nothing before this line may run an op.
tfdist.devices.split_physical_device(2)

# tfdist's records also reach pytest's capture (caplog) on the root logger; its
# own handler still writes them to the stream (capsys). tests/test_output.py
# checks the default, without this, in fresh processes.
logging.getLogger("tfdist").propagate = True

# Garbage left by in-process tests (strategies, traced functions, iterators) is
# cheap to free a test at a time and costly all at once: one late collection
# of many tests' garbage took 40-130 s under the suite's load, where a
# collection after each test takes well under a second. Freezing the modules'
# objects first keeps those collections from walking TensorFlow and both
# Kerases every time.
for _keras in ("keras", "tf_keras"):
  importlib.import_module(_keras)
gc.collect()
gc.freeze()


# The heaviest files first: under `--dist loadfile --no-loadscope-reorder` (make test) a
# free worker takes the next file in this order, so a long one handed out last would run
# on alone at the end while the other workers idle. Heaviest first, by what the files cost in
# the suite's runs (docs/suite-time.md, "The suite's workers and order", and the later CPU
# counts of docs/suite-time-cpu.md); the rest keep their order after these.
HEAVIEST_FIRST = (
    "training/test_checkpoints.py", "training/test_loop.py", "launch/test_ray.py",
    "test_notebooks.py", "training/test_local_sgd.py", "launch/test_local.py",
    "launch/test_slurm_launcher.py", "test_docs.py", "cli/test_compare.py",
    "cli/test_train.py", "benchmarks/test_chaos_benchmark.py", "test_keras_support.py",
    "test_recipes.py", "launch/test_watchdog.py", "strategies/test_multi_worker_mirrored.py",
    "task/test_task_keras.py", "cli/test_bench.py", "launch/test_jobset.py",
    "training/test_accumulation.py", "training/test_saved_model.py",
)


def pytest_collection_modifyitems(items):
  tests = os.path.dirname(os.path.abspath(__file__))
  rank = {path: i for i, path in enumerate(HEAVIEST_FIRST)}
  items.sort(key=lambda item: rank.get(os.path.relpath(str(item.path), tests),
                                       len(HEAVIEST_FIRST)))  # Stable: files stay whole.


@pytest.fixture(autouse=True)
def no_leaked_environment():
  """Fails a test that changes os.environ without restoring it (TF_CONFIG above all)."""
  before = dict(os.environ)
  yield
  after = dict(os.environ)
  leaked = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
  # Set by TensorFlow and Keras 3 themselves on first use, and by pytest.
  leaked -= {"TF2_BEHAVIOR", "GRPC_FAIL_FAST", "PYTEST_CURRENT_TEST", "KMP_DUPLICATE_LIB_OK",
             "KMP_INIT_AT_FORK"}
  assert not leaked, f"test leaked environment variables: {sorted(leaked)}"


def collect_and_freeze():
  """Frees the garbage of the test that just ran, then freezes what is left.

  What is left outlives the test: modules imported on first use, caches, module-scoped
  fixtures. Unfrozen, every later collection walks all of it again, this one after each test
  and those Python starts during the tests: 0.11 s of CPU per test in the fast tier, a
  third of its CPU (docs/suite-time.md, "A collection after every test"). A reference cycle
  frozen here and dropped later is not collected; nothing the suite checks waits on one.
  """
  gc.collect()
  gc.freeze()


@pytest.fixture(autouse=True)
def garbage_collected():
  """Frees each test's garbage after it (see the freeze above), before the environment check:
  a finalizer that restores a variable runs first."""
  yield
  collect_and_freeze()


# CPU seconds per test, beside pytest's wall-time durations: the suite is CPU-bound on 2
# cores (docs/suite-time-runs.md), so a test's share of the run is its CPU, its own and that of
# the processes it started and waited for, not its wall time under the others' load.
CPU_REPORT_LENGTH = 20
_CPU_START = pytest.StashKey[float]()
_VIRTUALENV = os.path.basename(sys.prefix)


class CpuCounts:
  """Each test's CPU seconds, whether it passed and whether it is marked `alone`, from the
  reports of its three phases (xdist's workers send theirs to the controller)."""

  def __init__(self):
    self.seconds = {}
    self.alone = set()
    self._passed, self._not_passed = set(), set()

  def log(self, report) -> None:
    for name, value in report.user_properties:
      if name == "cpu_seconds":
        self.seconds[report.nodeid] = value
      elif name == "alone" and value:
        self.alone.add(report.nodeid)
    # A test skipped or failed early used little CPU: not one to compare (tests/suite_cpu.py),
    # nor one marked `alone`, whose CPU follows the hour more than the code there.
    if report.when == "call" and report.passed:
      self._passed.add(report.nodeid)
    elif not report.passed:
      self._not_passed.add(report.nodeid)

  @property
  def passed(self) -> set:
    """The tests whose call passed and whose set-up and teardown did not fail."""
    return self._passed - self._not_passed

  def comparable(self) -> dict:
    """CPU seconds of the tests a reference run can be compared on: passed, not `alone`."""
    kept = self.passed - self.alone
    return {nodeid: seconds for nodeid, seconds in self.seconds.items() if nodeid in kept}

  def lines(self, virtualenv: str, tensorflow: str) -> list:
    """One JSON line per test, as `--cpu-lines` writes them."""
    passed = self.passed
    return [json.dumps({"test": nodeid, "cpu_seconds": round(seconds, 2),
                        "passed": nodeid in passed, "alone": nodeid in self.alone,
                        "virtualenv": virtualenv, "tensorflow": tensorflow})
            for nodeid, seconds in self.seconds.items()]


_CPU = CpuCounts()


def _cpu_seconds():
  times = os.times()
  return times.user + times.system + times.children_user + times.children_system


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
  item.stash[_CPU_START] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
  outcome = yield
  report = outcome.get_result()
  if call.when == "teardown" and _CPU_START in item.stash:
    report.user_properties.append(("cpu_seconds", _cpu_seconds() - item.stash[_CPU_START]))
    report.user_properties.append(("alone", item.get_closest_marker("alone") is not None))


def pytest_runtest_logreport(report):
  _CPU.log(report)


def pytest_addoption(parser):
  parser.addoption("--cpu-lines", metavar="PATH",
                   help="Append each test's CPU seconds to PATH, one JSON line a test.")


def pytest_terminal_summary(terminalreporter, config):
  if _TMPDIR_KEPT in config.stash:
    terminalreporter.write_line(config.stash[_TMPDIR_KEPT])
  # xdist's workers report to their controller, which prints and writes for them all.
  if not _CPU.seconds or hasattr(config, "workerinput"):
    return
  if config.getoption("cpu_lines"):
    with open(config.getoption("cpu_lines"), "a", encoding="utf-8") as lines:
      for line in _CPU.lines(_VIRTUALENV, tf.__version__):
        lines.write(line + "\n")
  heaviest = sorted(_CPU.seconds.items(), key=lambda item: -item[1])[:CPU_REPORT_LENGTH]
  terminalreporter.section(f"most CPU: {CPU_REPORT_LENGTH} tests and files, with the processes "
                           "they waited for")
  for nodeid, seconds in heaviest:
    terminalreporter.write_line(f"{seconds:8.1f}s cpu  {nodeid}")
  by_file = {}
  for nodeid, seconds in _CPU.seconds.items():
    path = nodeid.split("::")[0]
    by_file[path] = by_file.get(path, 0.0) + seconds
  terminalreporter.write_line("by file:")
  for path, seconds in sorted(by_file.items(), key=lambda item: -item[1])[:CPU_REPORT_LENGTH]:
    terminalreporter.write_line(f"{seconds:8.1f}s cpu  {path}")
  terminalreporter.write_line(f"{sum(_CPU.seconds.values()):8.1f}s cpu  in all, "
                              f"{len(_CPU.seconds)} tests")
  # A Ray actor's or a SLURM step's task is no child of the test: its CPU is in the
  # machine's, which `make test` prints per phase, and not here (docs/suite-time-cpu.md).
  terminalreporter.write_line("(not counted: tasks that Ray's and SLURM's daemons start)")
  # The hour's speed against a reference run, and the tests a change made heavier.
  for line in suite_cpu.summary(_CPU.comparable(), tensorflow=tf.__version__,
                                virtualenv=_VIRTUALENV):
    terminalreporter.write_line(line)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
  # A failed run keeps its folder, named in the terminal summary that follows (after xdist's
  # workers have ended: its own sessionfinish, which waits for them, runs before this one).
  if _made_tmpdir is not None and exitstatus in (
      pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR):
    session.config.stash[_TMPDIR_KEPT] = kept_line(_made_tmpdir)


def pytest_unconfigure(config):
  # Also after a run that never began its session (--markers, a usage error).
  if _made_tmpdir is not None and _TMPDIR_KEPT not in config.stash:
    left = remove_suite_tmpdir(_made_tmpdir)
    if left:
      sys.stderr.write(left + "\n")
