"""The launcher contract: run one command as every task of a job, somewhere.

A `Job` is the task counts; `LaunchOptions` is what every launcher shares
(time limit, restarts, grace period, Keras, environment, output, the stall
watch, the profile, the trains-alone check); a `Launcher` runs a command as each
of its tasks: `LocalLauncher` as processes here, `SlurmLauncher` through sbatch,
`RayLauncher` on a Ray cluster, `KubernetesLauncher` as manifests to apply. Each
backend takes the shared options and a few keywords of its own. `tfdist launch`
builds the options once from its flags and picks the backend by name from the
registry: `make_launcher(name, options, **backend_options)`.

Example:

    >>> options = LaunchOptions(timeout=600, max_restarts=1, stall_timeout=120)
    >>> launcher = make_launcher("local", options, network="loopback")
    >>> launcher.launch(["python", "train.py"], Job(workers=2))
    0
"""

import abc
import dataclasses
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple, Type

from tfdist import _variables as variables_lib
from tfdist.cluster import _spec as spec_lib
from tfdist.task import progress
from tfdist import _registry as registry
from tfdist.task import _keras as task_keras
from tfdist.task import _trains_alone as trains_alone

# Seconds between SIGTERM and SIGKILL when stopping a task: what SLURM (KillWait)
# and Kubernetes (terminationGracePeriodSeconds) give, so a backup that fits
# there fits here.
GRACE_PERIOD_SECONDS = 30.0


class LaunchError(RuntimeError):
  """A job that could not be started or followed to its end.

  `exit_code` is what `tfdist launch` exits with: 127 for a command that
  cannot start (as shells do), 2 for an engine or a network this machine does
  not offer, 1 for the rest.
  """

  exit_code = 1


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
  """What every launcher shares; each backend adds a few keywords of its own.

  Attributes:
    timeout: seconds before the whole job is stopped (None: no limit).
    max_restarts: how many times a failed task may be restarted in all; training
      resumes from its backup (`tfdist.training.checkpoints`).
    grace_period: seconds a task has between SIGTERM and SIGKILL when the job is
      stopped: time to back up.
    keras: the tasks' Keras, "tf_keras" or "keras3" (None: TF_USE_LEGACY_KERAS of
      the environment, else tf_keras; Keras 3 where tf_keras is not installed here, and
      tf_keras in a manifest).
    env: the tasks' base environment (None: this process's). A manifest's pods
      get only this, never the environment of the machine that writes them.
    output: where the job's lines go (None: sys.stdout).
    stall_timeout: seconds without a training step in any task before the job is
      stalled and every task's stacks are shown (0: off; None:
      TFDIST_STALL_TIMEOUT of the environment, else 300 for two or more training
      tasks); see `tfdist.launch.watchdog`.
    profile: trace these steps on every task with TensorFlow's profiler, e.g.
      "100-120" (steps count from 1); None: no trace.
    profile_dir: where `profile`'s runs go, one per task.
    trains_alone: "warn" or "error" for a task that would train alone under the
      multi-worker cluster (None: TFDIST_TRAINS_ALONE, else warn).
    data_work_dir: where a tf.data service's dispatcher journals its state
      (`Job.data_workers`), so that it restarts without losing its jobs.

  Raises:
    ValueError: a value out of range, naming the field.
  """

  timeout: Optional[float] = None
  max_restarts: int = 0
  grace_period: float = GRACE_PERIOD_SECONDS
  keras: Optional[str] = None
  env: Optional[Mapping[str, str]] = None
  output: Optional[TextIO] = None
  stall_timeout: Optional[float] = None
  profile: Optional[str] = None
  profile_dir: str = "tfdist-profile"
  trains_alone: Optional[str] = None
  data_work_dir: Optional[str] = None

  def __post_init__(self):
    for field in ("timeout", "stall_timeout"):
      value = getattr(self, field)
      if value is not None and not (_is_number(value) and value >= 0):
        raise ValueError(f"`{field}` must be a number of seconds >= 0 (or None). "
                         f"Received: {field}={value!r}")
    if not (_is_number(self.grace_period) and self.grace_period >= 0):
      raise ValueError(f"`grace_period` must be a number of seconds >= 0. "
                       f"Received: grace_period={self.grace_period!r}")
    spec_lib.check_task_count("max_restarts", self.max_restarts, 0)
    for field, choices in (("keras", task_keras.KERAS_CHOICES),
                           ("trains_alone", trains_alone.MODES)):
      value = getattr(self, field)
      if value is not None and value not in choices:
        raise ValueError(f"`{field}` must be one of {list(choices)} (or None). "
                         f"Received: {field}={value!r}")
    if self.profile:  # "" traces nothing, as None does (`--profile=$STEPS` with none).
      progress.parse_steps(self.profile)  # A ValueError names the form.

  def task_variables(self, *, profile_dir_here: bool = True) -> Dict[str, str]:
    """The `TFDIST_*` variables that carry the stall watch, the profile and the
    trains-alone mode to tasks that read them from their environment.

    Args:
      profile_dir_here: the profile's folder made absolute on this machine;
        False for a pod's, which stays relative to the pod's working directory.
    """
    out = {}
    if self.trains_alone:
      out[variables_lib.TRAINS_ALONE] = self.trains_alone
    if self.stall_timeout is not None:
      out[variables_lib.STALL_TIMEOUT] = f"{self.stall_timeout:g}"
    if self.profile:
      out[variables_lib.PROFILE] = self.profile
      out[variables_lib.PROFILE_DIR] = (os.path.abspath(self.profile_dir) if profile_dir_here
                                        else self.profile_dir)
    return out

  def environment(self, *, here: bool = False) -> Dict[str, str]:
    """The tasks' environment: `env` (or this process's) with `task_variables()`, and the
    tasks' Keras with tfdist's task site first on PYTHONPATH (`tfdist.task._keras`).

    `here`: the tasks import this machine's packages (the local launcher; SLURM's
    tasks run this Python), so tf_keras chosen where it is not installed is refused
    now, before every task would fail at its first `tf.keras`.

    Raises:
      ValueError: a TF_USE_LEGACY_KERAS in `env` that is neither 1 nor 0; with `here`,
        tf_keras chosen (`keras` or TF_USE_LEGACY_KERAS) and not installed.
    """
    base = os.environ if self.env is None else self.env
    if here:
      task_keras.resolve_here(self.keras, base, given_as="keras='tf_keras'")
    return {**base, **self.task_variables(), **task_keras.variables(self.keras, base)}


def _is_number(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class Job:
  """A cluster's task counts, as `ClusterSpec.local` and the launchers take them.

  Raises:
    ValueError: a count out of range.
  """

  workers: int = 2
  ps: int = 0
  chief: bool = False
  evaluator: bool = False
  # tf.data service data workers beside the cluster (with their dispatcher);
  # not TF tasks: they have no TF_CONFIG and never finish by themselves.
  data_workers: int = 0

  def __post_init__(self):
    for field, value, low in (("workers", self.workers, 1), ("ps", self.ps, 0),
                              ("data_workers", self.data_workers, 0)):
      spec_lib.check_task_count(field, value, low)

  @property
  def num_tasks(self) -> int:
    """Tasks that get an address: chief, workers and ps (the evaluator has none)."""
    return int(self.chief) + self.workers + self.ps


def with_coordinator(job: Job) -> Tuple[Job, str]:
  """`job`, with a chief added when it has ps tasks but no chief; and a note saying so.

  In parameter-server training only the chief runs the training program (it
  coordinates); workers and ps tasks serve until it is done. Without a chief
  nothing trains and nothing ends the job, so every launcher adds one the
  same way. The note is "" when nothing was added.
  """
  if job.ps and not job.chief:
    note = (f"parameter-server training needs a chief to run the program and end the job; "
            f"added one (chief + {job.workers} worker(s) + {job.ps} ps). Pass --chief "
            "(chief=True) to say so yourself.")
    return dataclasses.replace(job, chief=True), note
  return job, ""


class Launcher(abc.ABC):
  """Runs a command as every task of a `Job`.

  A backend's constructor takes the shared `LaunchOptions` first and its own
  keywords after it, and registers its class (`register`) under `name`.
  """

  name: str = ""

  def __init__(self, options: Optional[LaunchOptions] = None):
    if options is not None and not isinstance(options, LaunchOptions):
      raise TypeError(f"`options` must be a tfdist.launch.LaunchOptions. "
                      f"Received: {type(options).__name__}")
    self.options = options or LaunchOptions()

  @abc.abstractmethod
  def launch(self, command: Sequence[str], job: Job) -> int:
    """Runs `command` as every task of `job`; returns the job's exit code."""


LAUNCHERS: registry.Registry[Type[Launcher]] = registry.Registry("launcher")


def register(launcher: Type[Launcher]) -> Type[Launcher]:
  """Registers the `Launcher` class under its `name`; returns it."""
  return LAUNCHERS.register(launcher.name, launcher)


def available_launchers() -> List[str]:
  """The registered launcher names, sorted."""
  return sorted(LAUNCHERS.names())


def make_launcher(name: str, options: Optional[LaunchOptions] = None, /,
                  **backend_options: Any) -> Launcher:
  """The launcher registered as `name`, built with the shared `options` and its own.

  Raises:
    ValueError: unknown name, or a bad option.
  """
  return LAUNCHERS.get(name)(options, **backend_options)
