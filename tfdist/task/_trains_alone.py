"""A task that would train alone under a multi-worker TF_CONFIG is told so.

Under `tfdist launch --workers 2`, a script that builds
`tf.distribute.MirroredStrategy()` (which reads no TF_CONFIG), OneDevice or
CentralStorage, or that calls `fit` with no strategy at all, trains one
model per worker: each prints its own losses, ends with its own weights, and
exits 0. So in a chief or worker task whose TF_CONFIG names more than one
chief or worker (and no parameter servers, whose workers serve instead):

- building such a strategy, or starting such a `fit`, logs one line on that
  task naming it and the fix (`tf.distribute.MultiWorkerMirroredStrategy()`,
  or `tfdist.make_strategy("multi_worker_mirrored")`), once per task;
- at the end of the job the launcher says so when no two tasks ever built a
  strategy over the cluster (`job_note`): each task leaves a record in a
  folder the launcher made (`joined_folder`); a local or SLURM launch reads
  it (under SLURM in the job's work directory, which its nodes share), a Ray
  launch has each task's actor carry its node's records back (`records`,
  `add_records`).

Both warn by default: a launch may run programs that never train. With
`TFDIST_TRAINS_ALONE=error` (or `tfdist launch --trains_alone=error`) the
task raises `RuntimeError` with that line instead, and the launcher exits
with `TRAINS_ALONE_EXIT_CODE` from a job that otherwise passed.

Example (in a task of a 2-worker TF_CONFIG):

    tf.distribute.MirroredStrategy()
    # WARNING tfdist: This task (worker:1) trains alone: MirroredStrategy reads no TF_CONFIG ...
"""

import contextlib
import json
import logging
import os
import re
from typing import Callable, Iterable, Iterator, List, Mapping, MutableMapping, Optional, Tuple

from tfdist import _folders as folders
from tfdist import _variables as variables


logger = logging.getLogger("tfdist")

TRAINS_ALONE_ENV = variables.TRAINS_ALONE
MODES = ("warn", "error")
# Where the tasks of a local launch record that they built a strategy over the cluster.
JOINED_DIR_ENV = variables.JOINED_DIR
TRAINS_ALONE_EXIT_CODE = 1
# Strategies that build their replicas on this machine only, whatever TF_CONFIG says.
_LOCAL_STRATEGIES = ("MirroredStrategy", "OneDeviceStrategy", "CentralStorageStrategy")
_told = []  # Whether this task was told already: one line per task.
# Set by `not_a_task` in this process only: its children are tasks again.
_not_a_task = []
# What a task may leave in the folder: "<type>-<index>.<what>" (`_record`).
_RECORD = re.compile(r"(chief|worker)-\d+\.(joined|tensorflow)")


def mode(environ: Optional[Mapping[str, str]] = None) -> str:
  """`TFDIST_TRAINS_ALONE` ("warn", the default, or "error").

  Raises:
    ValueError: another value.
  """
  environ = os.environ if environ is None else environ
  value = environ.get(TRAINS_ALONE_ENV) or "warn"
  if value not in MODES:
    raise ValueError(f"`{TRAINS_ALONE_ENV}` must be one of {list(MODES)}. "
                     f"Received: {TRAINS_ALONE_ENV}={value!r}")
  return value


def cluster_task(environ: Optional[Mapping[str, str]] = None) -> Optional[Tuple[str, int]]:
  """("type:index", chiefs + workers) for a chief or worker task of a collective cluster, else None.

  None unless TF_CONFIG names 2 or more chiefs and workers, no ps, and this task is one of them.
  Under `tfdist launch --slurm` every task of 2 or more gets its TF_CONFIG from `tfdist task`;
  a SLURM step without one (that wrapper, a tf.data service's workers) is no such task.
  """
  environ = os.environ if environ is None else environ
  try:
    config = json.loads(environ.get("TF_CONFIG") or "{}")
  except ValueError:
    return None
  cluster, task = config.get("cluster") or {}, config.get("task") or {}
  workers = len(cluster.get("chief", ())) + len(cluster.get("worker", ()))
  if workers < 2 or cluster.get("ps") or task.get("type") not in ("chief", "worker"):
    return None
  return f"{task['type']}:{task.get('index', 0)}", workers


def line(what: str, received: str, task: str, workers: int) -> str:
  """The one line a task that trains alone is told."""
  return (f"This task ({task}) trains alone: {what}, so each of the {workers} workers in "
          f"TF_CONFIG trains its own model and they never meet. Build "
          f"tf.distribute.MultiWorkerMirroredStrategy() (or tfdist.make_strategy("
          f"'multi_worker_mirrored')) and the model under its scope(); {TRAINS_ALONE_ENV}="
          f"error stops here instead. Received: {received}")


def not_a_task() -> None:
  """Marks this process as no task: it records and tells nothing, whatever it imports.

  For the `tfdist task` wrapper, which the task site loads in too and which may
  import TensorFlow itself (to read SLURM's host list without `scontrol`): its
  command, a new process, is the task.
  """
  _not_a_task.append(True)


def _tell(what: str, received: str) -> None:
  found = None if _not_a_task else cluster_task()
  if found is None or _told:
    return
  _told.append(what)
  message = line(what, received, *found)
  if _mode_or_warn() == "error":
    raise RuntimeError(message)
  logger.warning(message)


def _mode_or_warn() -> str:
  try:
    return mode()
  except ValueError as e:
    logger.warning("%s; warning instead", e)
    return "warn"


def on_strategy(strategy) -> None:
  """For a strategy just built: tells a local one, records a multi-worker one (`_record`)."""
  name = type(strategy).__name__
  if name == "CollectiveAllReduceStrategy":  # What tf.distribute calls it.
    name = "MultiWorkerMirroredStrategy"
  resolver = getattr(strategy, "cluster_resolver", None)
  if name in _LOCAL_STRATEGIES:
    _tell(f"{name} reads no TF_CONFIG and builds its replicas on this machine only",
          f"{name}()")
  elif resolver is not None:
    jobs = resolver.cluster_spec().as_dict()
    if jobs.get("ps") or len(jobs.get("chief", ())) + len(jobs.get("worker", ())) > 1:
      _record("joined")
    else:  # E.g. a cluster resolver of its own that names this task alone.
      _tell(f"{name} was given a cluster of this task alone", f"{name}(cluster: {jobs})")


def on_fit(model) -> None:
  """For a Keras `fit` starting: tells one under a strategy that is not multi-worker."""
  strategy = model.distribute_strategy
  name = type(strategy).__name__
  if name in _LOCAL_STRATEGIES:
    _tell(f"fit runs under {name}, which reads no TF_CONFIG",
          f"model.distribute_strategy={name}")
  elif getattr(strategy, "cluster_resolver", None) is None:
    _tell("fit runs with no strategy (none was built, or the model was not built under "
          "its scope())", f"model.distribute_strategy={name} (the default)")


def _record(what: str) -> None:
  """Leaves `<type>-<index>.<what>` in the launcher's JOINED_DIR_ENV folder, if it gave one."""
  directory, found = os.environ.get(JOINED_DIR_ENV), None if _not_a_task else cluster_task()
  if not directory or found is None or not os.path.isdir(directory):
    return
  with open(os.path.join(directory, f"{found[0].replace(':', '-')}.{what}"), "w"):
    pass


def install() -> None:
  """Watches strategies and `fit` once TensorFlow and a Keras are imported (for the task site)."""
  if cluster_task() is None:
    return  # Nothing can train alone here: leave every import as it is.
  from tfdist.task import _imports as task_imports

  def tensorflow_loaded(module):
    from tfdist.internals import strategy_watch
    # Only a watched task counts: unwatched, one that joined looks like one that never did
    # (a false "trained alone" on a TensorFlow the watch is not applied to; it says so).
    if strategy_watch.enable_strategy_watch(on_strategy):
      _record("tensorflow")

  def keras_loaded(module):
    from tfdist.internals import strategy_watch
    strategy_watch.enable_fit_watch(module.Model, on_fit)

  task_imports.after_import("tensorflow", tensorflow_loaded)
  from tfdist.internals import strategy_watch
  for module in strategy_watch.MODEL_MODULES:  # Keras 3's and tf_keras's `Model`.
    task_imports.after_import(module, keras_loaded)


def job_note(directory: str, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
  """For the launcher at the end: the line saying no two tasks joined (None if two did).

  Silent when no task of the collective cluster imported TensorFlow with its strategy watch on.
  """
  names = os.listdir(directory) if os.path.isdir(directory) else []
  joined = sorted(n.rsplit(".", 1)[0] for n in names if n.endswith(".joined"))
  if len(joined) >= 2 or not any(n.endswith(".tensorflow") for n in names):
    return None
  who = f"only {joined[0].replace('-', ':')} did" if joined else "none did"
  return (f"No two tasks ever joined a collective: a multi-worker strategy over the cluster "
          f"is what makes workers train one model, and {who}, so each task trained alone. "
          f"Build tf.distribute.MultiWorkerMirroredStrategy() in the script (see the tasks' "
          f"lines above); {TRAINS_ALONE_ENV}=error makes this an error. Received: "
          f"{len(joined)} of the tasks joined")


@contextlib.contextmanager
def joined_folder(env: MutableMapping[str, str], parent: Optional[str] = None) -> Iterator[str]:
  """A new folder (0700) for the tasks' records, named in `env` as JOINED_DIR_ENV; removed after,
  also if this process is SIGKILLed.

  `parent`: where to make it (SLURM: the job's work directory, which its nodes
  share; default: the temp directory).
  """
  with folders.temporary("tfdist-joined-", parent) as directory:
    env[JOINED_DIR_ENV] = directory
    yield directory


def records(directory: str) -> List[str]:
  """The records tasks left in `directory`, for a launcher to carry from another node."""
  names = os.listdir(directory) if os.path.isdir(directory) else []
  return sorted(n for n in names if _RECORD.fullmatch(n))


def add_records(directory: str, names: Iterable[str]) -> None:
  """Leaves `names` (from `records` on a task's node) in the launcher's `directory`.

  Anything but a record's name (a path, say) is ignored: it came from another machine.
  """
  for name in names:
    if isinstance(name, str) and _RECORD.fullmatch(name) and os.path.isdir(directory):
      with open(os.path.join(directory, name), "w"):
        pass


def job_end(code: int, directory: str, environ: Mapping[str, str],
            report: Callable[[str], None]) -> int:
  """`code`, once `report` had `job_note`'s line; TRAINS_ALONE_EXIT_CODE for a pass in error mode.

  Example (a launcher, at the end of its job):

      with joined_folder(env) as directory:
        code = run_the_tasks(env)
        return job_end(code, directory, env, report)
  """
  note = job_note(directory)
  if note is None:
    return code
  report(note)
  error = mode(environ) == "error"
  return TRAINS_ALONE_EXIT_CODE if error and code == 0 else code
