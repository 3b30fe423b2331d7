"""The strategy registry: a name, its builder, and the cluster checks it owns.

`tfdist.strategies` registers each builder with `register(name, builder,
check_cluster=...)`, in a fixed order; `make_strategy(name, **options)` checks the options
against the builder's signature and builds it. A cluster strategy resolves its
cluster with `cluster_resolver`: an explicit `ClusterSpec` or TF resolver,
else the environment (TF_CONFIG, Kubernetes, SLURM), else none; the spec is
checked by the strategy's own validator.

Example:

    >>> def my_strategy(devices=None):
    ...   return tf.distribute.MirroredStrategy(devices)
    >>> register("my_strategy", my_strategy)
    >>> make_strategy("my_strategy").num_replicas_in_sync
"""

import dataclasses
import inspect
from typing import Any, Callable, List, Optional, Union

import tensorflow as tf

from tfdist import cluster as cluster_lib
from tfdist import _choices as choices
from tfdist import _registry as registry
from tfdist.cluster import environment

ClusterArg = Union[None, cluster_lib.ClusterSpec,
                   tf.distribute.cluster_resolver.ClusterResolver]
Validator = Callable[[cluster_lib.ClusterSpec], None]


@dataclasses.dataclass(frozen=True)
class StrategyEntry:
  """One registered strategy: its builder, its check of a cluster (None: takes none), and
  its traits (`tfdist._choices.StrategyTraits`; None for a strategy tfdist does not know)."""

  name: str
  builder: Callable[..., tf.distribute.Strategy]
  check_cluster: Optional[Validator] = None
  traits: Optional[choices.StrategyTraits] = None


STRATEGIES: registry.Registry[StrategyEntry] = registry.Registry("strategy")


def register(name: str, builder: Callable[..., tf.distribute.Strategy], *,
             check_cluster: Optional[Validator] = None,
             traits: Optional[choices.StrategyTraits] = None) -> StrategyEntry:
  """Registers `builder` as strategy `name`, with its cluster check; returns the entry.

  `traits`: what the mains and the training config derive from (default: tfdist's
  own traits of `name`, `tfdist._choices.STRATEGIES`, if it is one of them).
  """
  if traits is None and name in choices.strategy_names():
    traits = choices.strategy(name)
  return STRATEGIES.register(name, StrategyEntry(name, builder, check_cluster, traits))


def available_strategies() -> List[str]:
  """The registered strategy names, sorted."""
  return sorted(STRATEGIES.names())


def entry(name: str) -> StrategyEntry:
  """The registered entry of `name`.

  Raises:
    ValueError: unknown name; the message lists the valid ones.
  """
  return STRATEGIES.get(name)


def make_strategy(name: str, **options: Any) -> tf.distribute.Strategy:
  """Builds a `tf.distribute` strategy from its name.

  Args:
    name: one of `available_strategies()`.
    **options: the builder's keyword options, e.g. `devices=`, `cross_device_ops=`
      for "mirrored", `cluster=`, `communication=` for "multi_worker_mirrored".

  Returns:
    A `tf.distribute.Strategy`.

  Raises:
    ValueError: unknown name or invalid option value.
    TypeError: an option the strategy does not take.

  Example:

      >>> strategy = make_strategy("one_device")
      >>> strategy.num_replicas_in_sync
      1
  """
  builder = entry(name).builder
  valid = list(inspect.signature(builder).parameters)
  unknown = sorted(set(options) - set(valid))
  if unknown:
    raise TypeError(
        f"Strategy {name!r} does not take option(s) {unknown}. Its options: "
        f"{valid}. Received: {options!r}")
  return builder(**options)


def validate_cluster(name: str, spec: cluster_lib.ClusterSpec) -> None:
  """Runs strategy `name`'s own check of `spec`.

  Raises:
    ValueError: the strategy cannot use the cluster; the message says why.
  """
  check = entry(name).check_cluster
  if check is not None:
    check(spec)


def cluster_resolver(name: str, cluster: ClusterArg):
  """A TF cluster resolver from an explicit spec or resolver, else the environment.

  Returns None when there is no cluster at all (a single process).

  Raises:
    TypeError: `cluster` is neither a ClusterSpec nor a resolver.
    ValueError: strategy `name` cannot use the cluster.
  """
  if isinstance(cluster, tf.distribute.cluster_resolver.ClusterResolver):
    return cluster
  if cluster is not None and not isinstance(cluster, cluster_lib.ClusterSpec):
    raise TypeError(
        "`cluster` must be a tfdist.ClusterSpec or a tf.distribute cluster resolver. "
        f"Received: {cluster!r}")
  spec = environment.resolve(cluster)
  if spec is None:
    return None
  validate_cluster(name, spec)
  return spec.cluster_resolver()


def spec_of(resolver) -> Optional[cluster_lib.ClusterSpec]:
  """The resolver's cluster as a ClusterSpec seen from its task; None if single-task."""
  jobs = resolver.cluster_spec().as_dict()
  if sum(len(addresses) for addresses in jobs.values()) < 2 or resolver.task_type is None:
    return None
  return cluster_lib.ClusterSpec.from_dict(
      jobs, task={"type": resolver.task_type, "index": int(resolver.task_id)})
