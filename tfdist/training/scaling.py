"""Batch size, learning-rate and steps-per-call scaling across replicas.

With N replicas, each step consumes N per-replica batches, so the global batch
is N times larger and gradients are averaged over N times more examples. The
usual correction multiplies the learning rate by N (linear, Goyal et al. 2017)
or by sqrt(N), with a warm-up so that the first steps do not diverge.

Example:

    >>> global_batch_size(64, num_replicas=2)
    128
    >>> scale_learning_rate(0.1, num_replicas=4, rule="sqrt")
    0.2
"""

import math
from typing import Union

import tensorflow as tf

from tfdist import _keras_support as keras_support
from tfdist._choices import SCALING_RULES  # Re-exported as scaling.SCALING_RULES.

# None where Keras 3 is installed alone: `WarmUp`, a tf_keras schedule, then says what to install.
tf_keras = keras_support.optional_tf_keras()

StrategyOrCount = Union[int, tf.distribute.Strategy]


def _num_replicas(strategy_or_count: StrategyOrCount) -> int:
  if isinstance(strategy_or_count, tf.distribute.Strategy):
    return strategy_or_count.num_replicas_in_sync
  if isinstance(strategy_or_count, bool) or not isinstance(strategy_or_count, int) \
      or strategy_or_count < 1:
    raise ValueError(
        "`num_replicas` must be an integer >= 1 or a tf.distribute.Strategy. "
        f"Received: {strategy_or_count!r}")
  return strategy_or_count


def global_batch_size(per_replica_batch_size: int, num_replicas: StrategyOrCount) -> int:
  """The batch one synchronous step consumes: per-replica batch x replicas.

  Args:
    per_replica_batch_size: examples each replica sees per step.
    num_replicas: a count or a strategy (its `num_replicas_in_sync`).

  Returns:
    The global batch size to batch the dataset with.

  Raises:
    ValueError: a size is not a positive integer.
  """
  if isinstance(per_replica_batch_size, bool) or not isinstance(per_replica_batch_size, int) \
      or per_replica_batch_size < 1:
    raise ValueError(
        f"`per_replica_batch_size` must be an integer >= 1. Received: {per_replica_batch_size!r}")
  return per_replica_batch_size * _num_replicas(num_replicas)


def per_replica_batch_size(global_batch_size: int, num_replicas: StrategyOrCount) -> int:
  """The batch each replica sees, from the global batch.

  Raises:
    ValueError: the global batch does not divide evenly across replicas.
  """
  n = _num_replicas(num_replicas)
  if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int) \
      or global_batch_size < n or global_batch_size % n:
    nearest = n * max(1, round(global_batch_size / n)) if isinstance(global_batch_size, int) else n
    raise ValueError(
        f"`global_batch_size` must be a positive multiple of the {n} replicas, so "
        f"every replica gets the same batch; use e.g. {nearest}. "
        f"Received: global_batch_size={global_batch_size!r}")
  return global_batch_size // n


def scale_learning_rate(base_learning_rate: float, num_replicas: StrategyOrCount,
                        rule: str = "linear", *, warmup_steps: int = 0
                        ) -> Union[float, "WarmUp"]:
  """The learning rate for `num_replicas`, from one tuned for a single replica.

  Args:
    base_learning_rate: the rate that works at the per-replica batch size.
    num_replicas: a count or a strategy.
    rule: "linear" (x N), "sqrt" (x sqrt N) or "none".
    warmup_steps: if > 0, a `WarmUp` schedule from the base rate to the scaled
      one over that many steps, then the scaled rate; else the scaled rate.

  Raises:
    ValueError: unknown rule or non-positive rate.
  """
  if rule not in SCALING_RULES:
    raise ValueError(f"`rule` must be one of {list(SCALING_RULES)}. Received: {rule!r}")
  if not base_learning_rate > 0:
    raise ValueError(f"`base_learning_rate` must be > 0. Received: {base_learning_rate!r}")
  n = _num_replicas(num_replicas)
  factor = {"linear": n, "sqrt": math.sqrt(n), "none": 1}[rule]
  target = base_learning_rate * factor
  if not warmup_steps:
    return target
  return WarmUp(base_learning_rate, target=target, warmup_steps=warmup_steps)


def cosine_learning_rate(keras, base_learning_rate: float, num_replicas: StrategyOrCount,
                         rule: str, total_steps: int, warmup_steps: int = 0):
  """Cosine decay of the scaled rate over `total_steps`, after an optional warm-up to it.

  `keras`'s own `CosineDecay` (either Keras: it saves with the model), whose
  warm-up equals `WarmUp` into a cosine (tests/training/test_scaling.py).
  `tfdist train` uses it: async (parameter-server) updates settle as the rate
  falls, so every strategy ends near the same accuracy.
  """
  scaled = scale_learning_rate(base_learning_rate, num_replicas, rule)
  if warmup_steps:
    return keras.optimizers.schedules.CosineDecay(
        base_learning_rate, decay_steps=max(1, total_steps - warmup_steps),
        alpha=0.05, warmup_target=scaled, warmup_steps=warmup_steps)
  return keras.optimizers.schedules.CosineDecay(scaled, decay_steps=max(1, total_steps),
                                                alpha=0.05)


def _serializable(cls):
  """Registered with tf_keras, so that a model saved with the schedule loads again."""
  if tf_keras is None:
    return cls
  return tf_keras.saving.register_keras_serializable(package="tfdist")(cls)


@_serializable
class WarmUp(keras_support.tf_keras_base("optimizers.schedules.LearningRateSchedule",
                                         "tfdist.training.scaling.WarmUp")):
  """Linear warm-up from `initial_learning_rate` to a target, then the target.

  The target is a float or another schedule, which then starts counting after
  the warm-up. For a cosine decay, tf_keras's own
  `CosineDecay(..., warmup_target=, warmup_steps=)` does the same in one
  schedule; `cosine_learning_rate` (which `tfdist train` uses) is that. Registered with Keras, so a model saved
  with it loads again.

  Example:

      >>> lr = WarmUp(0.1, target=scale_learning_rate(0.1, 4), warmup_steps=100)
      >>> optimizer = tfdist.keras.optimizers.SGD(lr)
  """

  def __init__(self, initial_learning_rate: float, target, warmup_steps: int):
    super().__init__()
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
      raise ValueError(f"`warmup_steps` must be an integer >= 0. Received: {warmup_steps!r}")
    self.initial_learning_rate = initial_learning_rate
    self.target = target
    self.warmup_steps = warmup_steps

  def _target_at(self, step):
    if callable(self.target):
      return tf.cast(self.target(step - self.warmup_steps), tf.float32)
    return tf.constant(self.target, tf.float32)

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    target = self._target_at(step)
    if self.warmup_steps == 0:
      return target
    # Towards the target's first value: a schedule counts from the warm-up's end,
    # and must not be asked for its value at negative steps.
    end = self._target_at(tf.constant(float(self.warmup_steps)))
    fraction = tf.minimum(step / self.warmup_steps, 1.0)
    warm = self.initial_learning_rate + fraction * (end - self.initial_learning_rate)
    return tf.where(step < self.warmup_steps, warm, target)

  def get_config(self):
    """Keras's config, a schedule as target serialized: the schedule saves with the model."""
    target = self.target
    if isinstance(target, tf_keras.optimizers.schedules.LearningRateSchedule):
      target = tf_keras.optimizers.schedules.serialize(target)
    return {"initial_learning_rate": self.initial_learning_rate, "target": target,
            "warmup_steps": self.warmup_steps}

  @classmethod
  def from_config(cls, config):
    """The inverse of `get_config`, a schedule as target included."""
    config = dict(config)
    if isinstance(config["target"], dict):
      config["target"] = tf_keras.optimizers.schedules.deserialize(config["target"])
    return cls(**config)


def steps_per_execution(strategy: tf.distribute.Strategy) -> int:
  """How many steps Keras should run per call under `strategy`.

  Every call of Keras's train function pays the strategy's fixed cost (about
  1-2 ms on a CPU: dispatch to each replica, gathering the results), which
  dwarfs a small model's step. Running several steps per call pays it once for
  all of them: `model.compile(..., steps_per_execution=steps_per_execution(s))`.
  One replica has little to amortise.
  """
  return 1 if strategy.num_replicas_in_sync == 1 else 10
