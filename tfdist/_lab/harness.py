"""The measurement harness: variants interleaved in one process, and `fit` timers.

Every comparison in tfdist runs its variants in one process, alternating
A, B, A, B, ... (odd rounds in reverse order), so the machine's noise hits
them alike, and reports medians of the per-round ratios. Nothing here asserts
a speed: the numbers are printed and saved.

Example:

    >>> timers = {"raw": fit_timer(model_fn, (784,), raw), "tfdist": fit_timer(model_fn, (784,), ours)}
    >>> interleaved_ratio(timers["raw"], timers["tfdist"], repeats=21)["cpu"]["ratio"]
"""

import contextlib
import statistics
from typing import Callable, Dict, List, Mapping, Sequence, TypeVar

import numpy as np
import tensorflow as tf
import tf_keras as keras

from tfdist.training import timing

T = TypeVar("T")


def interleave(variants: Mapping[str, Callable[[], T]], repeats: int, *,
               warmup: bool = False) -> Dict[str, List[T]]:
  """Runs every variant once per round, `repeats` rounds; what each returned, by name.

  Odd rounds run the variants in reverse order: whatever a run leaves behind
  (a prefetch thread still filling its buffer, memory to give back) then
  lands on each side equally, and a steady drift of the machine cancels out.
  With `warmup`, each variant runs once first, uncounted.
  """
  names = list(variants)
  if warmup:
    for name in names:
      variants[name]()
  results: Dict[str, List[T]] = {name: [] for name in names}
  for round_ in range(repeats):
    for name in (names if round_ % 2 == 0 else names[::-1]):
      results[name].append(variants[name]())
  return results


def interleaved_ratio(a: Callable[[], Dict[str, float]], b: Callable[[], Dict[str, float]],
                      repeats: int) -> Dict[str, Dict[str, float]]:
  """Per clock, the median of b()/a() over `repeats` interleaved pairs.

  `a` and `b` return seconds by clock name (see `timing.CLOCKS`). Wall time is
  what a user waits; CPU time is the work done, and the steadier clock here,
  so overheads are judged by it.
  """
  runs = interleave({"a": a, "b": b}, repeats)
  samples = list(zip(runs["a"], runs["b"]))
  return {clock: {"ratio": statistics.median(tb[clock] / ta[clock] for ta, tb in samples),
                  "a_ms": 1000 * statistics.median(ta[clock] for ta, _ in samples),
                  "b_ms": 1000 * statistics.median(tb[clock] for _, tb in samples)}
          for clock in samples[0][0]}


def synthetic_dataset(input_shape: Sequence[int], batch_size: int) -> tf.data.Dataset:
  """Random inputs and 10-class labels, 16 batches repeated: timing needs no real data."""
  rng = np.random.default_rng(0)
  x = rng.random((batch_size * 16,) + tuple(input_shape)).astype("float32")
  y = rng.integers(0, 10, batch_size * 16)
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(
      batch_size, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)


def random_like(model: keras.Model, batch_size: int, rng: np.random.Generator,
                batches: int = 8) -> tf.data.Dataset:
  """Random inputs and targets of the model's shapes, batched and repeated.

  Any model can be timed on it with an MSE loss: timing needs shapes, not data.
  """
  x = rng.random((batch_size * batches,) + tuple(model.input_shape[1:])).astype("float32")
  y = rng.random((batch_size * batches,) + tuple(model.output_shape[1:])).astype("float32")
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size).repeat()


def fit_timer(model_fn: Callable[[], keras.Model], input_shape: Sequence[int],
              strategy: tf.distribute.Strategy = None, *, batch_size: int = 64,
              steps: int = 100,
              steps_per_execution: int = 1) -> Callable[[], Dict[str, float]]:
  """A function timing one `fit` of `steps` steps: seconds per step by clock; warmed up once."""
  scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
  with scope:
    model = model_fn()
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=steps_per_execution)
  dataset = synthetic_dataset(input_shape, batch_size)
  if strategy is not None:
    dataset = strategy.experimental_distribute_dataset(dataset)
  return epoch_timer(model, dataset, steps)


def epoch_timer(model: keras.Model, dataset, steps: int, *,
                warmup: bool = True) -> Callable[[], Dict[str, float]]:
  """A function timing one epoch of `steps` steps of `model.fit(dataset)`: seconds per step."""
  clock = timing.EpochClock()

  def run() -> Dict[str, float]:
    model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[clock])
    return {name: seconds / steps for name, seconds in clock.seconds.items()}

  if warmup:
    run()  # Tracing and the first steps are not what we measure.
  return run
