"""Where a cluster comes from: one small contract, resolved in a fixed order.

A `ClusterEnvironment` knows one way a process learns that it is a task of a
cluster: `TF_CONFIG` (`tf_config.TFConfigEnvironment`), a Kubernetes Indexed
Job (`kubernetes.KubernetesEnvironment`), a SLURM job step
(`slurm.SLURMEnvironment`). `tfdist.cluster` registers each in `ENVIRONMENTS`,
in that order; `detect` asks them in registration order and returns the first
that applies.

Resolution, as everywhere in tfdist: an explicit cluster argument, else the
environment, else none (a single process). `resolve` does exactly that.

Example:

    >>> environment = detect({"TF_CONFIG": '{"cluster": {"worker": ["h:2222"]}}'})
    >>> environment.name
    'tf_config'
"""

import abc
import os
from typing import List, Mapping, Optional

from tfdist import _registry as registry

# "ClusterSpec" in annotations is tfdist.cluster._spec.ClusterSpec, not imported:
# spec imports this module, and the way through the code runs one way.



class ClusterEnvironment(abc.ABC):
  """One source of a cluster spec, such as TF_CONFIG or SLURM."""

  name: str = ""

  @abc.abstractmethod
  def detect(self, environ: Mapping[str, str]) -> bool:
    """Whether `environ` describes a task of a cluster of this kind."""

  @abc.abstractmethod
  def cluster_spec(self, environ: Mapping[str, str]) -> "ClusterSpec":
    """The cluster, seen from this task; raises ValueError naming what is wrong."""

  def __repr__(self) -> str:
    return f"{type(self).__name__}()"


ENVIRONMENTS: registry.Registry[ClusterEnvironment] = registry.Registry("cluster environment")


def register(environment: ClusterEnvironment) -> ClusterEnvironment:
  """Adds `environment` under its name, after the ones already registered; returns it."""
  return ENVIRONMENTS.register(environment.name, environment)


def available_environments() -> List[str]:
  """The registered environments' names, in the order `detect` asks them."""
  return ENVIRONMENTS.names()


def detect(environ: Optional[Mapping[str, str]] = None) -> Optional[ClusterEnvironment]:
  """The first registered environment that applies to `environ` (default os.environ)."""
  environ = os.environ if environ is None else environ
  return next((e for _, e in ENVIRONMENTS.items() if e.detect(environ)), None)


def resolve(cluster: Optional["ClusterSpec"] = None,
            environ: Optional[Mapping[str, str]] = None) -> Optional["ClusterSpec"]:
  """`cluster` if given, else the detected environment's spec, else None."""
  if cluster is not None:
    return cluster
  environ = os.environ if environ is None else environ
  environment = detect(environ)
  return None if environment is None else environment.cluster_spec(environ)
