"""Workers that disagree are refused before their first collective, naming what differs.

Two workers of one MultiWorkerMirroredStrategy job whose models differ (a
per-host config gone wrong) fail in TensorFlow's first broadcast with words
that name neither the variable nor the task ("Shape mismatch in the collective
instance 103", tensorflow/tensorflow#47203), or hang; workers with other
versions or device counts fail stranger still. `checked_variables(strategy)`
is a variable creator: under it, before each variable's initial value is
broadcast, every worker gathers a small record of it (name, shape, dtype; and
first this process's fingerprint: tfdist, TensorFlow, Keras and Python
versions, the Keras in use, device kinds and counts, the cluster spec) and
compares. A difference raises on every task, e.g.

    ValueError: Workers disagree before their first collective: variable 3,
    dense/kernel: (4, 32) float32 on worker:0, (4, 64) float32 on worker:1. ...

Under `tfdist launch` every MultiWorkerMirroredStrategy scope gets it
(`tfdist.internals.strategy_scope`); elsewhere:

    with strategy.scope(), tfdist.strategies.checked_variables(strategy):
      model = build_model()
"""

import contextlib
import hashlib
import json
import logging
import os
import platform
import threading
from typing import Dict, List

import tensorflow as tf

import tfdist
from tfdist.internals import strategy_scope

# Bytes of one record in the gather: names longer than fits are cut.
RECORD_BYTES = 768
CHECK_WORKERS_ENV = "TFDIST_CHECK_WORKERS"


def fingerprint() -> Dict[str, str]:
  """What every worker of a job must share, by field."""
  keras_in_use = "tf_keras" if os.environ.get("TF_USE_LEGACY_KERAS", "") in (
      "1", "true", "True") else "keras3"
  try:
    import keras  # pylint: disable=import-outside-toplevel
    keras_version = keras.__version__
  except ImportError:
    keras_version = "none"
  devices = {}
  for device in tf.config.list_logical_devices():
    devices[device.device_type] = devices.get(device.device_type, 0) + 1
  cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
  return {
      "tfdist": tfdist.__version__,
      "tensorflow": tf.__version__,
      "keras": keras_version,
      "keras in use": keras_in_use,
      "python": platform.python_version(),
      "devices": ", ".join(f"{count} {kind}" for kind, count in sorted(devices.items())),
      "cluster spec": hashlib.sha1(json.dumps(cluster, sort_keys=True).encode()).hexdigest()[:12],
  }


def task_names(strategy) -> List[str]:
  """The tasks in the collective group's order (chief first, then workers)."""
  resolver = getattr(strategy, "cluster_resolver", None)
  spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
  names = [f"chief:{i}" for i in range(len(spec.get("chief", [])))]
  names += [f"worker:{i}" for i in range(len(spec.get("worker", [])))]
  return names or ["worker:0"]


class _Checker:
  """The records this process sent, and the gather that compares them."""

  def __init__(self, strategy):
    self.strategy = strategy
    self.count = 0
    self.busy = threading.local()

  def compare(self, what: str, record: Dict[str, str]) -> None:
    """Gathers `record` from every replica; raises ValueError naming the fields that differ."""
    data = json.dumps(record, sort_keys=True).encode()[:RECORD_BYTES].ljust(RECORD_BYTES)
    local = tf.constant([list(data)], dtype=tf.int32)
    values = self.strategy.experimental_distribute_values_from_function(lambda _: local)
    # TF makes a function per gather and warns after five of them: expected here.
    with _quiet_retracing():
      gathered = self.strategy.gather(values, axis=0).numpy()
    names = task_names(self.strategy)
    per_task = max(1, len(gathered) // len(names))
    records = {}
    for row, task in zip(gathered[::per_task], names):
      text = bytes(int(b) for b in row).decode(errors="replace").strip()
      try:
        records[task] = json.loads(text)
      except ValueError:
        records[task] = {"record": text}
    differences = []
    for field in sorted({f for r in records.values() for f in r}):
      seen: Dict[str, List[str]] = {}
      for task, r in records.items():
        seen.setdefault(str(r.get(field, "nothing")), []).append(task)
      if len(seen) > 1:
        sides = ", ".join(f"{value} on {' and '.join(tasks)}" for value, tasks in seen.items())
        differences.append(sides if field == "value" else f"{field}: {sides}")
    if differences:
      raise ValueError(
          f"Workers disagree before their first collective: {what}: " + "; ".join(differences) +
          ". Every worker must run the same program, versions and model; fix the task whose "
          f"value differs. Received: {len(records)} tasks")

  def creator(self, next_creator, **kwargs):
    # Only eager, cross-replica creation (a model's build): an optimizer's slots come
    # inside a step, in replica context, where a gather cannot run.
    if getattr(self.busy, "value", False) or not tf.executing_eagerly() or \
        not tf.distribute.in_cross_replica_context():
      return next_creator(**kwargs)
    self.busy.value = True
    try:
      if self.count == 0:
        self.compare("fingerprint", fingerprint())
      index, self.count = self.count, self.count + 1
      name = kwargs.get("name") or "unnamed"
      scope = tf.get_current_name_scope()
      name = f"{scope}/{name}" if scope and not str(name).startswith(scope) else str(name)
      initial = kwargs.get("initial_value")
      what = f"variable {index}, {name}"

      dtype = kwargs.get("dtype")

      def check(value):
        tensor = tf.convert_to_tensor(value, dtype=tf.as_dtype(dtype) if dtype else None)
        self.compare(what, {"name": name, "value": f"{tuple(tensor.shape)} {tensor.dtype.name}"})
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


class _NoRetracingWarning(logging.Filter):
  def filter(self, record):
    return "triggered tf.function retracing" not in record.getMessage()


@contextlib.contextmanager
def _quiet_retracing():
  tf_logger, quiet = logging.getLogger("tensorflow"), _NoRetracingWarning()
  tf_logger.addFilter(quiet)
  try:
    yield
  finally:
    tf_logger.removeFilter(quiet)


@contextlib.contextmanager
def checked_variables(strategy):
  """Under it, each new variable is compared across workers before its broadcast (module doc)."""
  # Kept on the strategy: one checker per strategy, gone with it (an id could be reused).
  checker = getattr(strategy, "_tfdist_checker", None)
  if checker is None:
    checker = strategy._tfdist_checker = _Checker(strategy)
  with tf.variable_creator_scope(checker.creator):
    yield checker


def enable_for_every_scope(environ=None) -> bool:
  """Every multi-worker MultiWorkerMirroredStrategy scope checks its variables (the task site).

  Unless `TFDIST_CHECK_WORKERS=0`: the check costs one small gather per
  variable as the model is built.
  """
  environ = os.environ if environ is None else environ
  if environ.get(CHECK_WORKERS_ENV, "1") == "0":
    return False
  return strategy_scope.enable_checked_scope(checked_variables)


__all__ = ["checked_variables", "enable_for_every_scope", "fingerprint", "task_names"]
