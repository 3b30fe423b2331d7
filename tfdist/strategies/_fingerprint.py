"""Workers that disagree are refused before their first collective, naming what differs.

Two workers of one MultiWorkerMirroredStrategy job whose models differ (a
per-host config gone wrong) fail in TensorFlow's first broadcast with words
that name neither the variable nor the task ("Shape mismatch in the collective
instance 103", tensorflow/tensorflow#47203), or hang for good: a worker with
one variable more waits for a broadcast its peers never join. Workers with
other versions, Keras or device counts fail stranger still.

`checked_variables(strategy)` compares, across the workers, first each
process's fingerprint (tfdist, TensorFlow, Keras and Python versions, the
Keras in use, the replicas on this worker, the cluster spec) when the scope
is entered, then a small record of each variable (name, shape, dtype) before
its initial value is broadcast. The records travel through TensorFlow's
coordination service, which every multi-worker strategy starts, never through
a collective: reading a record has a deadline, so the check itself cannot
hang, whatever the workers built.

- A difference raises on every task that sees it, e.g.

      ValueError: Workers disagree before their first collective: variable 3,
      dense/kernel: (4, 32) float32 on worker:0, (4, 64) float32 on worker:1. ...

- A variable one worker makes and another never does (a layer more or
  fewer) raises `variable 4, dense_2/kernel: only on worker:1 ...` on that
  worker once the other has begun training: under `tfdist launch` (the task
  site's `enable_for_every_scope`), Keras `fit` and `tfdist.training.loop`
  publish how many variables the task built as training begins. The task
  that began training is blocked in a collective by then, so a thread of
  each task watches for the job's error and fails its collectives with the
  same words. Without that hook, such a variable is named by the deadline.
- A worker that never reaches a record (hung while building its model, or
  with no model at all) is waited for, with a line in the log every minute,
  and the check fails after `timeout` seconds naming it. Under `tfdist
  launch` the stall watchdog names such a task sooner, with its stack.

Under `tfdist launch` every MultiWorkerMirroredStrategy scope gets it
(`tfdist.internals.strategy_scope`); elsewhere:

    with strategy.scope(), tfdist.strategies.checked_variables(strategy):
      model = build_model()
"""

import atexit
import contextlib
import hashlib
import itertools
import json
import logging
import os
import platform
import threading
import time
import weakref
from typing import Callable, Dict, List, Optional

import tensorflow as tf

from tfdist import _stack
from tfdist import _variables as variables
import tfdist
from tfdist.task import progress
from tfdist.internals import strategy_scope
from tfdist.internals import tensorflow as tf_internals

logger = logging.getLogger("tfdist")

CHECK_WORKERS_ENV = variables.CHECK_WORKERS
# Seconds a task waits for another's record before the check fails, naming it.
# Longer than the launcher's stall watchdog by default (15 min before a first
# step), which names a stuck task sooner and with its stack.
CHECK_SECONDS = 1200.0
# How long one read of a peer's record waits; between reads the check looks for
# the job's error and for the peer having begun training (a read of BUILT_MS: the
# wait includes the round trip to the service's leader).
POLL_MS, BUILT_MS = 500, 100
# How long one read of the watcher waits for the job's error (it returns as soon as
# the error is set): between reads it looks whether it is still needed.
WATCH_MS = 1000
# A waiting task says so after this many seconds, and then every TELL_SECONDS.
FIRST_TELL_SECONDS, TELL_SECONDS = 10.0, 60.0
# What a record may hold: one variable's or one fingerprint's fields, a name cut to fit.
RECORD_CHARS = 4096
# Keys in the coordination service's store; `{check}` numbers this process's
# checked strategies, so a task that builds two strategies compares each with its twin.
KEY = "tfdist/check/{check}/{task}/{what}"
ERROR_KEY = "tfdist/check/{check}/error"
# The `what` under which a task says how many variables it had made when its k-th `fit`
# began training (`built/k`): a peer still before its own k-th `fit` that waits for one more
# variable waits for one that will not come before that `fit`'s first collective.
BUILT = "built/{fits}"
FINGERPRINT = "fingerprint"


def fingerprint(strategy=None) -> Dict[str, str]:
  """What every worker of a job must share, by field; with `strategy`, its replicas here."""
  keras_in_use = "tf_keras" if os.environ.get("TF_USE_LEGACY_KERAS", "") in (
      "1", "true", "True") else "keras3"
  # The installed Keras 3, from its package metadata: importing it cost a process that trains
  # with tf_keras about a second of CPU (docs/benchmarks/launch.md, "What Keras 3 cost a
  # tf_keras worker's start").
  keras_version = next(filter(None, map(_stack.installed, _stack.KERAS_DISTRIBUTIONS)), "none")
  devices = {}
  for device in tf.config.list_logical_devices():
    devices[device.device_type] = devices.get(device.device_type, 0) + 1
  cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
  fields = {
      "tfdist": tfdist.__version__,
      "tensorflow": tf.__version__,
      "keras": keras_version,
      "keras in use": keras_in_use,
      "python": platform.python_version(),
      "devices": ", ".join(f"{count} {kind}" for kind, count in sorted(devices.items())),
      "cluster spec": hashlib.sha1(json.dumps(cluster, sort_keys=True).encode()).hexdigest()[:12],
  }
  if strategy is not None:
    fields["strategy"] = _strategy_name(strategy)
    fields["replicas on this worker"] = str(len(strategy.extended.worker_devices))
  return fields


def _strategy_name(strategy) -> str:
  name = type(strategy).__name__
  return "MultiWorkerMirroredStrategy" if name == "CollectiveAllReduceStrategy" else name


def task_names(strategy) -> List[str]:
  """The tasks in the collective group's order (chief first, then workers)."""
  resolver = getattr(strategy, "cluster_resolver", None)
  spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
  names = [f"chief:{i}" for i in range(len(spec.get("chief", [])))]
  names += [f"worker:{i}" for i in range(len(spec.get("worker", [])))]
  return names or ["worker:0"]


def own_task(strategy) -> str:
  resolver = getattr(strategy, "cluster_resolver", None)
  task_type = getattr(resolver, "task_type", None) or "worker"
  task_id = getattr(resolver, "task_id", None) or 0
  return f"{task_type}:{task_id}"


class Store:
  """Where the records meet: TensorFlow's coordination service (`tfdist.internals.tensorflow`)."""

  insert = staticmethod(tf_internals.insert)
  wait_for_key = staticmethod(tf_internals.wait_for_key)
  abort = staticmethod(tf_internals.abort_collectives)


def differences(records: Dict[str, Dict[str, str]]) -> List[str]:
  """Per field that differs between tasks, each side's value and tasks, in field order."""
  found = []
  for field in sorted({f for r in records.values() for f in r}):
    seen: Dict[str, List[str]] = {}
    for task, record in records.items():
      seen.setdefault(str(record.get(field, "nothing")), []).append(task)
    if len(seen) > 1:
      sides = ", ".join(f"{value} on {' and '.join(tasks)}" for value, tasks in seen.items())
      found.append(sides if field == "value" else f"{field}: {sides}")
  return found


def _parse(text: str) -> Dict[str, str]:
  """A peer's record: a JSON object of strings; anything else reads as what it is."""
  try:
    record = json.loads(text)
  except ValueError:
    record = None
  if not isinstance(record, dict):
    return {"record": text[:200]}
  return {str(k)[:100]: str(v)[:RECORD_CHARS] for k, v in record.items()}


class _Checker:
  """This process's records for one strategy, and the reads that compare them with the peers'."""

  _numbers = itertools.count()  # Checked strategies in this process, in the order made.

  def __init__(self, strategy, timeout: float = CHECK_SECONDS, store=Store,
               clock: Callable[[], float] = time.monotonic, me: Optional[str] = None,
               tasks: Optional[List[str]] = None):
    # Not the strategy itself: the checker lives on it, and must not keep it alive.
    self.timeout, self.store, self.clock = timeout, store, clock
    self.me = me or own_task(strategy)
    self.peers = [t for t in (tasks or task_names(strategy)) if t != self.me]
    self.check = next(self._numbers)
    self.count = 0  # Variables compared so far.
    self.fits = 0  # Times training began (a Keras `fit`) since this strategy was made.
    self.fingerprinted = False
    self.failed = False  # This task raised the job's error itself.
    self.comparing = False  # The main thread is in `compare`: it raises any error itself.
    self.job_error: Optional[str] = None  # What another task found, as the watcher read it.
    self.busy = threading.local()
    self.stop = threading.Event()
    self.steps = 0  # Steps before the watcher started: it waits for one more.
    self.watcher: Optional[threading.Thread] = None

  def key(self, task: str, what) -> str:
    return KEY.format(check=self.check, task=task, what=what)

  def compare(self, what: str, record: Dict[str, str], index: Optional[int] = None) -> None:
    """Publishes `record` as `what`, reads every peer's; raises ValueError naming any difference.

    `index`: the variable's number, so that a peer that built fewer is known.
    """
    self.comparing = True  # Any error of the job's reaches this thread here: no abort needed.
    self.start_watching()
    try:
      self._compare(what, record, index)
    finally:
      self.comparing = False

  def _compare(self, what: str, record: Dict[str, str], index: Optional[int]) -> None:
    suffix = FINGERPRINT if index is None else str(index)
    record = {k: v[:RECORD_CHARS] for k, v in record.items()}
    self.store.insert(self.key(self.me, suffix), json.dumps(record, sort_keys=True))
    records = {self.me: record}
    for peer in self.peers:
      records[peer] = self._wait_for(peer, suffix, what, index)
    records = dict(sorted(records.items(), key=lambda kv: _order(kv[0])))
    if index is not None and len({r.get("name") for r in records.values()}) > 1:
      # Another variable at this place: each side's name goes with its shape.
      what = f"variable {index}"
      records = {task: {"value": f"{r.get('name')} {r.get('value')}"}
                 for task, r in records.items()}
    found = differences(records)
    if found:
      self.fail(f"Workers disagree before their first collective: {what}: " + "; ".join(found) +
                ". Every worker must run the same program, versions and model; fix the task "
                f"whose value differs. Received: {len(records)} tasks")

  def _wait_for(self, peer: str, suffix: str, what: str, index: Optional[int]) -> Dict[str, str]:
    start = told = self.clock()
    tell_after, waiting = FIRST_TELL_SECONDS, False
    while True:
      text = self.store.wait_for_key(self.key(peer, suffix), POLL_MS)
      if text is not None:
        return _parse(text)
      if not waiting:  # Once: a wait is no progress, but the watchdog sees where it is.
        waiting = True
        progress.phase(progress.CHECK)
      if self.job_error is not None:  # Another task found a difference (the watcher read it).
        self.failed = True
        raise ValueError(self.job_error)
      # The peer began a `fit` this task has not: it waits in that fit's first collective.
      built = None if index is None else self.store.wait_for_key(
          self.key(peer, BUILT.format(fits=self.fits + 1)), BUILT_MS)
      if built is not None and 0 <= _int(built) <= index:
        self.fail(f"Workers disagree before their first collective: {what}: only on "
                  f"{self.me}; {peer} made {_int(built)} variables under this strategy and began "
                  "training. Every worker must build the same model; fix the task whose model "
                  f"differs. Received: {_int(built)} variables on {peer}, more on {self.me}")
      now = self.clock()
      if now - told >= tell_after:
        told, tell_after = now, TELL_SECONDS
        logger.warning("tfdist: %s has waited %.0fs for %s to reach %s (the check of what every "
                       "worker builds); is it still building, or stuck?", self.me, now - start,
                       peer, what)
      if now - start > self.timeout:
        self.fail(f"Workers did not meet at {what}: {peer} did not reach it within "
                  f"{self.timeout:g}s ({self.me} did). It is stuck before it (its stack shows "
                  "where), or builds a model with fewer variables and never began `fit`. "
                  f"Received: timeout={self.timeout:g}s")

  def fail(self, message: str) -> None:
    """Raises `message` here, and leaves it for the other tasks (the watcher fails theirs)."""
    self.failed = True
    try:
      self.store.insert(ERROR_KEY.format(check=self.check), message)
    except RuntimeError:
      pass  # The service is failing: this task's error still stands.
    raise ValueError(message)

  def built(self) -> None:
    """Training begins: says how many variables this task made, for a peer that waits for more."""
    self.fits += 1
    if not self.failed and self.count:
      try:
        self.store.insert(self.key(self.me, BUILT.format(fits=self.fits)), str(self.count))
      except RuntimeError:
        pass

  def start_watching(self) -> None:
    """A thread that fails this task's collectives with the job's error once a task finds one.

    It ends once a step completes (every worker joined it), and starts again
    for variables made after that (another model).
    """
    if self.watcher is not None and self.watcher.is_alive():
      return
    self.stop.clear()
    self.steps = progress.steps_done()
    self.watcher = threading.Thread(target=self._watch, name="tfdist-check-watcher",
                                    daemon=True)
    self.watcher.start()

  def stop_watching(self) -> None:
    self.stop.set()
    if self.watcher is not None and self.watcher is not threading.current_thread():
      self.watcher.join(timeout=2.5 * WATCH_MS / 1000)  # Its read ends within WATCH_MS.

  def _watch(self) -> None:
    # Until a first step ends (every worker joined it: their models agree) or this process ends.
    while not self.stop.is_set() and progress.steps_done() == self.steps:
      try:
        error = self.store.wait_for_key(ERROR_KEY.format(check=self.check), WATCH_MS)
      except RuntimeError:
        return  # The service is gone: the job is ending anyway.
      if self.failed:
        return
      if error is None:
        continue
      self.job_error = error = _printable(error)
      # In `compare`, the main thread raises it within a read; after it, it may be in a
      # collective that only an abort ends.
      deadline = time.monotonic() + 3 * (POLL_MS + BUILT_MS) / 1000
      while self.comparing and not self.failed and time.monotonic() < deadline:
        time.sleep(0.05)
      if not self.failed:
        logger.error("tfdist: %s", error)
        self.store.abort(error)
      return

  def creator(self, next_creator, **kwargs):
    # Only eager, cross-replica creation (a model's build): an optimizer's slots come
    # inside a step, in replica context, where every worker makes the same ones.
    if getattr(self.busy, "value", False) or not tf.executing_eagerly() or \
        not tf.distribute.in_cross_replica_context():
      return next_creator(**kwargs)
    self.busy.value = True
    try:
      index, self.count = self.count, self.count + 1
      name = kwargs.get("name") or "unnamed"
      scope = tf.get_current_name_scope()
      name = f"{scope}/{name}" if scope and not str(name).startswith(scope) else str(name)
      initial = kwargs.get("initial_value")
      what = f"variable {index}, {name}"
      dtype = kwargs.get("dtype")

      def check(value):
        tensor = tf.convert_to_tensor(value, dtype=tf.as_dtype(dtype) if dtype else None)
        self.compare(what, {"name": name, "value": f"{tuple(tensor.shape)} {tensor.dtype.name}"},
                     index)
        progress.phase(progress.BUILD)  # A variable made: the build moves.
        return value

      if callable(initial) and not strategy_scope.is_restore_on_create(initial):
        def checked_initial_value(*args, **kw):
          return check(initial(*args, **kw))
        kwargs["initial_value"] = checked_initial_value
      elif not callable(initial):
        check(initial)
      return next_creator(**kwargs)
    finally:
      self.busy.value = False


def _order(task: str):
  task_type, _, index = task.rpartition(":")
  return (task_type != "chief", task_type, _int(index))


def _printable(text: str) -> str:
  """Another task's words, as this task shows them: printable, and at most RECORD_CHARS."""
  return "".join(c if c.isprintable() else " " for c in str(text)[:RECORD_CHARS])


def _int(text) -> int:
  try:
    return int(text)
  except (TypeError, ValueError):
    return -1


# Every live checker of this process, for `all_built` and the exit: each goes with its strategy.
_checkers: "weakref.WeakSet[_Checker]" = weakref.WeakSet()
_warned_off = []


@atexit.register
def _stop_watching() -> None:
  for checker in list(_checkers):
    checker.stop_watching()


@contextlib.contextmanager
def checked_variables(strategy, timeout: float = CHECK_SECONDS):
  """Under it, each new variable is compared across workers before its broadcast (module doc).

  Needs TensorFlow's coordination service, which MultiWorkerMirroredStrategy
  starts on a tested TensorFlow; without it nothing is checked (one warning).

  Raises:
    ValueError: the workers differ, or one did not reach the check within `timeout` seconds.
  """
  if not tf_internals.coordination_service_up():
    if not _warned_off:
      _warned_off.append(True)
      logger.warning("tfdist: workers are not compared before their first collective: "
                     "TensorFlow's coordination service is not up in this process")
    yield None
    return
  # Kept on the strategy: one checker per strategy, gone with it (an id could be reused).
  checker = getattr(strategy, "_tfdist_checker", None)
  if checker is None:
    checker = strategy._tfdist_checker = _Checker(strategy, timeout)
    _checkers.add(checker)
  if not checker.fingerprinted:
    checker.compare(FINGERPRINT, fingerprint(strategy))
    checker.fingerprinted = True
    progress.phase(progress.BUILD)
  with tf.variable_creator_scope(checker.creator):
    yield checker


def all_built() -> None:
  """Every checker of this process says how many variables it made (training begins)."""
  for checker in _checkers:
    checker.built()


def enable_for_every_scope(environ=None) -> bool:
  """Every multi-worker MultiWorkerMirroredStrategy scope checks its variables (the task site).

  Unless `TFDIST_CHECK_WORKERS=0`. Each Keras `fit` says, as it begins
  training, how many variables this task built, so a worker that waits for
  one more learns it never comes.
  """
  environ = os.environ if environ is None else environ
  if environ.get(CHECK_WORKERS_ENV, "1") == "0":
    return False
  progress.when_training_begins(all_built)
  return strategy_scope.enable_checked_scope(checked_variables)


__all__ = ["checked_variables", "enable_for_every_scope", "fingerprint", "task_names"]
