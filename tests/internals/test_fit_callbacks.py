"""tfdist.internals.fit_callbacks: every `fit` gets the callbacks, however it passes its own."""

import itertools
import re

import numpy as np
import pytest

import helpers
from tfdist.internals import fit_callbacks

# Version-sensitive: `make test-versions` runs it on the oldest and newest supported TensorFlow too.
pytestmark = pytest.mark.versions


@pytest.fixture
def seen():
  import tf_keras
  import keras
  batches = []
  strategies = []  # The strategy each fit's input is read by, as the input hook gets it.

  def make(base):
    class Count(base):
      def on_train_batch_end(self, batch, logs=None):
        batches.append(type(self).__mro__[1].__module__)
    return [Count()]

  read_by = lambda x, strategy: strategies.append(strategy) or x
  assert fit_callbacks.enable_fit_callbacks(make, read_by)
  yield batches, strategies
  fit_callbacks.disable_fit_callbacks()
  assert tf_keras.Model.fit.__module__.startswith("tf_keras")
  assert keras.Model.fit.__module__.startswith("keras")


@pytest.mark.parametrize("library", ["tf_keras", "keras"])
def test_every_fit_of_both_kerases_gets_the_callbacks_beside_its_own(seen, library):
  seen, strategies = seen
  keras = __import__(library)
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
  model.compile(optimizer="sgd", loss="mse")
  x, y = np.zeros((8, 2), "float32"), np.zeros((8, 1), "float32")
  own = keras.callbacks.History()
  model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[own])
  model.fit(x, y, 4, 1, 0, [own])  # callbacks passed by position
  model.fit(x, y, batch_size=4, epochs=1, verbose=0)
  assert len(seen) == 6 and all(module.startswith(library) for module in seen), seen
  assert own.history  # The script's own callback still ran.
  assert strategies == [model.distribute_strategy] * 3  # x by position each time.
  model.fit(x=x, y=y, batch_size=8, epochs=1, verbose=0)  # x by name.
  assert strategies == [model.distribute_strategy] * 4


@pytest.mark.parametrize("library", ["tf_keras", "keras"])
@pytest.mark.parametrize("verbose", [1, 0])
def test_a_launched_tasks_fit_logs_its_status_with_the_loss_under_both_kerases(
    monkeypatch, library, verbose):
  from tfdist.task import progress
  keras = __import__(library)
  reporter = progress._Reporter()  # As in a launched task worker:0, but counting only.
  reporter.task, reporter.status_seconds = "worker:0", 2.5
  ticks = itertools.count()
  reporter.clock = lambda: float(next(ticks))  # A second a read: a line every few batches.
  monkeypatch.setattr(progress, "_reporter", reporter)
  assert fit_callbacks.enable_fit_callbacks(progress.keras_callbacks)
  try:
    with helpers.tfdist_messages() as lines:
      model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
      model.compile(optimizer="sgd", loss="mse")
      x, y = np.ones((16, 2), "float32"), np.ones((16, 1), "float32")
      model.fit(x, y, batch_size=1, epochs=1, verbose=verbose)
  finally:
    fit_callbacks.disable_fit_callbacks()
  if not verbose:
    assert lines == []
    return
  # tf_keras hands tfdist's callbacks its logs as tensors: the loss is fetched for the line.
  # Under 1e-3 it is written as 5.1635e-04 (the model's start is not seeded; a CI run
  # met one).
  form = (r"tfdist: worker:0 epoch 1/1, step \d+/16, [\d.]+ steps/s, loss \d+\.\d{4}"
          r"(e-\d\d)?(, about \d+s left in this epoch)?")
  assert lines and all(re.fullmatch(form, line) for line in lines), lines
  assert any(line.endswith("left in this epoch") for line in lines), lines


def test_an_untested_tf_keras_is_named_once_in_the_line_that_says_so(monkeypatch, caplog):
  # Before: "tfdist's tfdist's fit callbacks ... is not applied".
  import dataclasses
  gate = fit_callbacks.GATES["fit_callbacks"]
  monkeypatch.setitem(fit_callbacks.GATES, "fit_callbacks",
                      dataclasses.replace(gate, tested=((9, 0), (9, 0))))
  caplog.set_level("WARNING", logger="tfdist")
  assert not fit_callbacks._tested("tf_keras")
  (line,) = [r.getMessage() for r in caplog.records if r.name == "tfdist"]
  assert line.startswith("tfdist's fit callbacks (") and line.count("tfdist") == 1, line
