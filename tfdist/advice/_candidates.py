"""Timing the ways of training a model on one machine's devices, side by side, for `tfdist advise`.

All the ways run in one process on the same devices (logical CPUs stand in
for GPUs: `tfdist.devices.split_physical_device` first), interleaved round by
round, so that the machine's noise hits them alike; a process's speed can sit
on a level up to 2x off another's here, which separate processes would
compare (docs/measuring.md).

The ways, each at a per-replica batch:
  - "one_device": the model on one of the devices;
  - "mirrored", "central_storage": one replica per device;
  - "model_parallel": a Sequential's layers split over the devices
    (`tfdist.placement.place_layers`), one replica, `micro_batches` parts.

With `longer`, each way is also timed in fits that many times as long, of the
same model in the same rounds: `tfdist advise --check` holds the advice's
short fits to these, so that what it measures is the advice's own error, not
the level this process happens to run on.

Example:

    >>> time_ways(model_fn, {"one_device": ("one_device", 64), "mirrored": ("mirrored", 64)},
    ...           steps=20, repeats=3)
    {'step': {'one_device': 0.0031, 'mirrored': 0.0042}}
"""

import math
from typing import Callable, Dict, Tuple

import numpy as np
import tensorflow as tf
import tf_keras

from tfdist import _choices as choices
from tfdist import placement
from tfdist._lab import harness
from tfdist.strategies import make_strategy

# The ways on one machine: each single-machine strategy, and the model split over devices.
OPTIONS = (*choices.strategy_names(choices.SINGLE_MACHINE), "model_parallel")
# At least this long per timed fit: a fit's first steps and its jitter cost
# milliseconds, which over 20 steps of 2 ms read as 25%.
MIN_FIT_SECONDS = 0.5


def compiled(model_fn: Callable):
  """The model of `model_fn`, compiled with Adam and MSE if it came uncompiled (as tfdist train's)."""
  model = model_fn()
  if model.optimizer is None:
    model.compile(optimizer=tf_keras.optimizers.Adam(1e-3), loss="mse")
  return model


def step_timer(model_fn: Callable, option: str, *, batch_size: int, steps: int,
               micro_batches: int = 1, longer: int = 0) -> Dict[str, Callable[[], float]]:
  """Functions returning the seconds of one steady training step of `option`, measured anew.

  "step" times one fit of n steps: `steps`, or more if a fit would take
  under MIN_FIT_SECONDS, so that each fit's first steps (a new iterator
  filling its prefetch buffer) weigh little, as in a long training. (The
  difference of a 2n- and an n-step fit would remove them, but triples the
  noise.) With `longer`, "check" times fits of `longer` x n steps of the same
  model. Tracing happens here, untimed.

  Raises:
    ValueError: an unknown option, or model_parallel on fewer than 2 devices.
  """
  if option not in OPTIONS:
    raise ValueError(f"`option` must be one of {OPTIONS}. Received: {option!r}")
  rng = np.random.default_rng(0)
  if option == "model_parallel":
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(devices) < 2:
      raise ValueError("model_parallel needs 2 or more devices; split the CPU first "
                       f"(tfdist.devices.split_physical_device). Received: devices={devices}")
    source = compiled(model_fn)
    model = placement.place_layers(source, devices, micro_batches=micro_batches)
    model.compile(optimizer=tf_keras.optimizers.Adam(1e-3), loss="mse")
    dataset = harness.random_like(source, batch_size, rng)
  else:
    strategy = make_strategy(option)
    with strategy.scope():
      model = compiled(model_fn)
    dataset = strategy.experimental_distribute_dataset(
        harness.random_like(model, batch_size * strategy.num_replicas_in_sync, rng))
  calibrate = harness.epoch_timer(model, dataset, steps)  # Warmed up: tracing is untimed.
  steps = max(steps, math.ceil(MIN_FIT_SECONDS / max(calibrate()["wall"], 1e-6)))
  fits = {"step": steps, **({"check": longer * steps} if longer else {})}
  return {kind: _wall(harness.epoch_timer(model, dataset, n, warmup=False))
          for kind, n in fits.items()}


def _wall(timer: Callable[[], Dict[str, float]]) -> Callable[[], float]:
  return lambda: timer()["wall"]


def time_ways(model_fn: Callable, ways: Dict[str, Tuple[str, int]], *, steps: int,
              repeats: int, micro_batches: int = 1,
              longer: int = 0) -> Dict[str, Dict[str, float]]:
  """Seconds per steady step of each way {name: (option, per-replica batch)}, interleaved.

  {"step": {name: seconds}}, and with `longer` also "check" (see
  `step_timer`), all in the same rounds. The fastest of `repeats` rounds:
  other work on a shared machine only ever adds time, so the minimum is the
  steadiest estimate (as timeit reports).
  """
  timers = {}
  for name, (option, batch) in ways.items():
    for kind, timer in step_timer(model_fn, option, batch_size=batch, steps=steps,
                                  micro_batches=micro_batches, longer=longer).items():
      timers[kind, name] = timer
  result: Dict[str, Dict[str, float]] = {}
  for (kind, name), seconds in harness.interleave(timers, repeats).items():
    result.setdefault(kind, {})[name] = min(seconds)
  return result
