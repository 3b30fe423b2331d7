"""The named choices of strategies and jobs, importable without TensorFlow.

The command line lists them in `--help` and checks flags against them before
anything imports TensorFlow (seconds per process); the modules that act on a
choice raise with the same list.
"""

import dataclasses

# MirroredStrategy's all-reduce across the devices of one machine.
CROSS_DEVICE_OPS = ("auto", "nccl", "hierarchical_copy", "reduction_to_one_device")
# MultiWorkerMirroredStrategy's collective implementation.
COMMUNICATION = ("auto", "ring", "nccl")
# How the learning rate follows the global batch (tfdist.training.scaling).
SCALING_RULES = ("linear", "sqrt", "none")


# --- The strategies: what tfdist knows of each, without TensorFlow ---
#
# `tfdist.strategies` registers a builder under each name, with these traits
# (a test holds the two lists equal); the mains, the training config and the
# measurements derive their lists from them instead of naming strategies.

# A strategy's kind, as TensorFlow's distributed-training guide sorts them.
DEFAULT = "default"  # TensorFlow's default strategy: no distribution.
SINGLE_MACHINE = "single machine"  # Replicas on the devices of one machine.
COLLECTIVE = "multi-worker collective"  # Synchronous replicas on many machines, all-reduce.
PARAMETER_SERVER = "parameter server"  # Asynchronous workers, variables on ps tasks.
KINDS = (DEFAULT, SINGLE_MACHINE, COLLECTIVE, PARAMETER_SERVER)


@dataclasses.dataclass(frozen=True)
class StrategyTraits:
  """One strategy's traits.

  `kind`: one of KINDS. `copy_per_replica`: each replica keeps its own copy of
  the weights, kept equal by all-reduce (what local SGD lets drift between
  syncs); central storage keeps one copy on the CPU.
  """

  name: str
  kind: str
  copy_per_replica: bool

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"`kind` must be one of {list(KINDS)}. Received: kind={self.kind!r} "
                       f"for strategy {self.name!r}")

  @property
  def takes_cluster(self) -> bool:
    """Whether it runs over a cluster of tasks (TF_CONFIG), and a cluster may add an evaluator."""
    return self.kind in (COLLECTIVE, PARAMETER_SERVER)

  @property
  def synchronous(self) -> bool:
    """Whether every replica takes each step together (not so under parameter servers)."""
    return self.kind != PARAMETER_SERVER


STRATEGIES = (
    StrategyTraits("default", DEFAULT, copy_per_replica=False),
    StrategyTraits("one_device", SINGLE_MACHINE, copy_per_replica=False),
    StrategyTraits("mirrored", SINGLE_MACHINE, copy_per_replica=True),
    StrategyTraits("central_storage", SINGLE_MACHINE, copy_per_replica=False),
    StrategyTraits("multi_worker_mirrored", COLLECTIVE, copy_per_replica=True),
    StrategyTraits("parameter_server", PARAMETER_SERVER, copy_per_replica=False),
)


def strategy_names(*kinds: str) -> list:
  """The strategies' names, in registration order; of `kinds` only, if given."""
  return [s.name for s in STRATEGIES if not kinds or s.kind in kinds]


def strategy(name: str) -> StrategyTraits:
  """The traits of strategy `name`.

  Raises:
    ValueError: unknown name; the message lists the valid ones.
  """
  for traits in STRATEGIES:
    if traits.name == name:
      return traits
  raise ValueError(f"Unknown strategy name. Valid names: {strategy_names()}. Received: {name!r}")
