"""tfdist.training.timing: the epoch clock every timer in tfdist uses."""

import time

import numpy as np

from tfdist import keras
from tfdist.training import timing


class _Sleep(keras.callbacks.Callback):
  def on_train_batch_end(self, batch, logs=None):
    time.sleep(0.02)  # Wall time passes, hardly any CPU time.


def test_epoch_clock_times_each_epoch_by_wall_and_cpu():
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
  model.compile(optimizer="sgd", loss="mse")
  clock = timing.EpochClock()
  model.fit(np.zeros((40, 2)), np.zeros((40, 1)), batch_size=10, epochs=3, verbose=0,
            callbacks=[clock, _Sleep()])
  assert len(clock.epochs) == 3 and set(clock.seconds) == set(timing.CLOCKS)
  assert clock.wall_times() == [epoch["wall"] for epoch in clock.epochs]
  assert all(wall >= 4 * 0.02 for wall in clock.wall_times())  # 4 steps of 20 ms each.
  assert clock.seconds["cpu"] < clock.seconds["wall"]
