"""Strategy overhead: tfdist-built strategies against the same ones built with raw TF.

- `strategy_overhead`: `model.fit` step time under a tfdist-built strategy over
  the same strategy built with raw `tf.distribute`, by wall and by CPU time.
- `small_model_overhead`: a small MLP under MirroredStrategy over 2 logical
  devices, over the same MLP with no strategy; with Keras defaults and with
  `scaling.steps_per_execution(strategy)`.
"""

from typing import Dict, List, Sequence

import tensorflow as tf

from tfdist import _choices as choices
from tfdist import strategies
from tfdist._choices import Name
from tfdist._lab import harness
from tfdist._lab import models as models_lib
from tfdist.training import scaling


def raw_strategy(name: str) -> tf.distribute.Strategy:
  """The strategy as a user builds it with tf.distribute alone (same devices, same all-reduce)."""
  # Named explicitly: without GPUs, TF's defaults use /cpu:0 alone, whatever
  # the logical split.
  devices = [d.name for d in tf.config.list_logical_devices("CPU")]
  if name == Name.ONE_DEVICE:
    return tf.distribute.OneDeviceStrategy("/cpu:0")
  if name == Name.MIRRORED:
    # The all-reduce tfdist's `auto` picks without GPUs; TF's own default
    # (collectives) cannot be built twice in one process (tensorflow#62790).
    return tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
  if name == Name.CENTRAL_STORAGE:
    return tf.distribute.experimental.CentralStorageStrategy(devices)
  raise ValueError(f"No raw counterpart for {name!r}; use one of "
                   f"{choices.strategy_names(choices.SINGLE_MACHINE)}. Received: {name!r}")


def strategy_overhead(names: Sequence[str], models: Sequence[str], repeats: int,
                      steps: int = 100) -> List[dict]:
  """Rows of fit step time, tfdist strategy (b) over raw tf.distribute strategy (a).

  Each row has "model", "strategy" and, per clock, `interleaved_ratio`'s result.
  """
  rows = []
  for model in models:
    model_fn, shape = models_lib.MODELS[model]
    for name in names:
      raw = harness.fit_timer(model_fn, shape, raw_strategy(name), steps=steps)
      ours = harness.fit_timer(model_fn, shape, strategies.make_strategy(name), steps=steps)
      rows.append({"model": model, "strategy": name, **harness.interleaved_ratio(raw, ours, repeats)})
  return rows


def small_model_overhead(repeats: int, steps: int = 100) -> Dict[str, dict]:
  """The MLP under Mirrored over 2 logical devices (b), over the MLP without a strategy (a).

  "raw" is tf.distribute with Keras's defaults, "tfdist" adds
  `steps_per_execution(strategy)`; each holds `interleaved_ratio`'s result per clock.
  """
  model_fn, shape = models_lib.MODELS["mlp"]
  plain = harness.fit_timer(model_fn, shape, steps=steps)
  raw = harness.fit_timer(model_fn, shape, raw_strategy(Name.MIRRORED), steps=steps)
  strategy = strategies.make_strategy(Name.MIRRORED)
  ours = harness.fit_timer(model_fn, shape, strategy, steps=steps,
                   steps_per_execution=scaling.steps_per_execution(strategy))
  return {"raw": harness.interleaved_ratio(plain, raw, repeats),
          "tfdist": harness.interleaved_ratio(plain, ours, repeats),
          "replicas": strategy.num_replicas_in_sync}
