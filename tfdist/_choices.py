"""The named choices of strategies and jobs, importable without TensorFlow.

The command line lists them in `--help` and checks flags against them before
anything imports TensorFlow (seconds per process); the modules that act on a
choice raise with the same list.
"""

import dataclasses
from typing import Tuple

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


# What Keras 3's own `fit` does under a strategy (tf_keras's fits under every one),
# as measured and listed in docs/known_issues.md.
KERAS3_FITS = "fits"
# Fits with one worker, fails with two or more (keras-team/keras#20585);
# tfdist.internals.keras patches it.
KERAS3_FAILS_MULTI_WORKER = "fails with 2+ workers"
# No `fit` at all: no DatasetCreator, no ClusterCoordinator (keras-team/keras#18624);
# tfdist refuses it before the first step and trains with tfdist.training.loop.
KERAS3_NO_FIT = "no fit"
KERAS3_SUPPORT = (KERAS3_FITS, KERAS3_FAILS_MULTI_WORKER, KERAS3_NO_FIT)


@dataclasses.dataclass(frozen=True)
class StrategyTraits:
  """One strategy's traits.

  `kind`: one of KINDS. `copy_per_replica`: each replica keeps its own copy of
  the weights, kept equal by all-reduce (what local SGD lets drift between
  syncs); central storage keeps one copy on the CPU. `keras3_fit`: one of
  KERAS3_SUPPORT. `choices`: (option, its values) for each option of the
  builder that users choose by name; `tfdist train` offers each as a flag of
  the same name, which a new one needs (tests/cli/test_train.py holds them equal).
  """

  name: str
  kind: str
  copy_per_replica: bool
  keras3_fit: str = KERAS3_FITS
  choices: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"`kind` must be one of {list(KINDS)}. Received: kind={self.kind!r} "
                       f"for strategy {self.name!r}")
    if self.keras3_fit not in KERAS3_SUPPORT:
      raise ValueError(f"`keras3_fit` must be one of {list(KERAS3_SUPPORT)}. Received: "
                       f"keras3_fit={self.keras3_fit!r} for strategy {self.name!r}")

  @property
  def takes_cluster(self) -> bool:
    """Whether it runs over a cluster of tasks (TF_CONFIG), and a cluster may add an evaluator."""
    return self.kind in (COLLECTIVE, PARAMETER_SERVER)

  @property
  def synchronous(self) -> bool:
    """Whether every replica takes each step together (not so under parameter servers)."""
    return self.kind != PARAMETER_SERVER


class Name:
  """Each strategy's name, for code that means that one strategy: a measurement of
  MirroredStrategy, a flag's default. A list of strategies derives from STRATEGIES
  instead, and no module outside this one and tfdist.strategies spells a name out
  (tests/test_architecture.py)."""

  DEFAULT = "default"
  ONE_DEVICE = "one_device"
  MIRRORED = "mirrored"
  CENTRAL_STORAGE = "central_storage"
  MULTI_WORKER_MIRRORED = "multi_worker_mirrored"
  PARAMETER_SERVER = "parameter_server"


STRATEGIES = (
    StrategyTraits(Name.DEFAULT, DEFAULT, copy_per_replica=False),
    StrategyTraits(Name.ONE_DEVICE, SINGLE_MACHINE, copy_per_replica=False),
    StrategyTraits(Name.MIRRORED, SINGLE_MACHINE, copy_per_replica=True,
                   choices=(("cross_device_ops", CROSS_DEVICE_OPS),)),
    StrategyTraits(Name.CENTRAL_STORAGE, SINGLE_MACHINE, copy_per_replica=False),
    StrategyTraits(Name.MULTI_WORKER_MIRRORED, COLLECTIVE, copy_per_replica=True,
                   keras3_fit=KERAS3_FAILS_MULTI_WORKER,
                   choices=(("communication", COMMUNICATION),)),
    StrategyTraits(Name.PARAMETER_SERVER, PARAMETER_SERVER, copy_per_replica=False,
                   keras3_fit=KERAS3_NO_FIT),
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
