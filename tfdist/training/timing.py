"""Timing a Keras `fit` by epoch: the one epoch clock of tfdist.

`EpochClock` is a Keras callback that times each epoch from its first step to
its end, by wall time (what a user waits) and by CPU time (the work done,
which on a shared VM is far steadier: two identical strategies measured
0.996-1.005 by CPU time against +-5% by wall time; see docs/measuring.md).
`tfdist train` reports its speed with it, and the benchmarks time with it.
"""

import time
from typing import Dict, List

from tfdist import _keras_support as keras_support

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


class EpochClock(keras_support.callback_base()):
  """Seconds from each epoch's first step to its end, by clock.

  Only the steps: `fit`'s set-up and the distributed iterator it builds per
  call cost tens of ms of their own, which would swamp a few ms of strategy.

  Attributes:
    epochs: one {clock name: seconds} per finished epoch, in order.
  """

  def __init__(self):
    super().__init__()
    self.epochs: List[Dict[str, float]] = []

  def on_epoch_begin(self, epoch, logs=None):
    self._start = {name: now() for name, now in CLOCKS.items()}

  def on_epoch_end(self, epoch, logs=None):
    self.epochs.append({name: now() - self._start[name] for name, now in CLOCKS.items()})

  @property
  def seconds(self) -> Dict[str, float]:
    """The last finished epoch's seconds by clock."""
    return self.epochs[-1]

  def wall_times(self) -> List[float]:
    """Wall seconds of every finished epoch."""
    return [epoch["wall"] for epoch in self.epochs]
