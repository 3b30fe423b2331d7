"""The launcher contract: run one command as every task of a job, somewhere.

A `Job` is the task counts; a `Launcher` runs a command as each of its tasks:
`local.LocalLauncher` as processes here, `slurm.SlurmLauncher` through sbatch,
`kubernetes.KubernetesLauncher` as manifests to apply. `tfdist launch` builds
a `Job` from its flags and dispatches on `make_launcher(name, ...)`.

Example:

    >>> launcher = make_launcher("local", network="loopback")
    >>> launcher.launch(["python", "train.py"], Job(workers=2))
    0
"""

import abc
import dataclasses
from typing import Any, List, Sequence, Tuple, Type

from tfdist import cluster as cluster_lib
from tfdist import _registry as registry


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
      cluster_lib.check_task_count(field, value, low)

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
  """Runs a command as every task of a `Job`."""

  name: str = ""

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


def make_launcher(name: str, /, **options: Any) -> Launcher:
  """The launcher registered as `name`, built with `options`.

  Raises:
    ValueError: unknown name.
  """
  return LAUNCHERS.get(name)(**options)
