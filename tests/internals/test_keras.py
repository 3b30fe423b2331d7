"""tfdist.internals.keras: Keras 3 trains under 2-worker MultiWorkerMirrored.

Each multi-worker test launches one real 2-worker cluster on localhost.
"""

import ast
import re

import pytest

import helpers
from tfdist.internals import keras as keras_internals

# Version-sensitive: `make test-versions` runs it on the oldest and newest supported TensorFlow too.
pytestmark = pytest.mark.versions

KERAS_FIT = f"{helpers.SCRIPTS}/keras_fit.py"


def _launch(*script_args, workers=2, python_flags=()):
  return helpers.run(helpers.tfdist_cli("launch", f"--workers={workers}", "--timeout=240", "--",
                                        *helpers.python(*python_flags, KERAS_FIT, *script_args)),
                     timeout=300)


def _per_worker(stdout, key):
  return {m.group(1): m.group(2) for m in re.finditer(rf"^\[(worker:\d)\] {key}: (.*)$", stdout,
                                                       re.MULTILINE)}


def test_the_version_gate_names_the_version():
  assert keras_internals.unsupported_reason((3, 15)) is None
  assert keras_internals.unsupported_reason((3, 12)) is None
  # Keras 3.10 crashed inside the patch: the gate is what was run, not what was read.
  assert "not applied to Keras 3.10" in keras_internals.unsupported_reason((3, 10))
  reason = keras_internals.unsupported_reason((3, 17))
  assert "not applied to Keras 3.17" in reason and "keras-team/keras#20585" in reason
  assert "not applied to Keras 3.7" in keras_internals.unsupported_reason((3, 7))


def test_the_installed_keras_is_one_the_workaround_was_tested_with():
  # When this fails, a new Keras is installed: rerun this file and widen TESTED_KERAS
  # if raw Keras still fails (test_raw_keras3_still_fails) and tfdist's run trains.
  assert keras_internals.unsupported_reason() is None


def test_enable_and_disable_restore_keras_own_functions():
  from keras.src.backend.tensorflow import trainer
  cls = keras_internals.trainer_class(trainer)  # TensorFlowTrainer, Trainer from Keras 3.16
  before = (trainer.reduce_per_replica, cls._maybe_symbolic_build,
            cls.fit)
  with keras_internals.multi_worker() as applied:
    assert applied and keras_internals.is_enabled()
    assert trainer.reduce_per_replica is not before[0]
    assert cls.fit.__wrapped__ is before[2]
  assert not keras_internals.is_enabled()
  assert (trainer.reduce_per_replica, cls._maybe_symbolic_build,
          cls.fit) == before


@pytest.mark.slow
def test_the_workaround_changes_nothing_on_one_machine():
  import keras
  import numpy as np
  import tfdist
  x = np.random.default_rng(0).random((64, 4)).astype("float32")
  y = x.sum(axis=1, keepdims=True)

  def train():
    keras.utils.set_random_seed(0)
    with tfdist.make_strategy("mirrored").scope():
      model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
      model.compile(optimizer="sgd", loss="mse")
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
    return model.get_weights()

  plain = train()
  with keras_internals.multi_worker():
    patched = train()
  for a, b in zip(plain, patched):
    np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_raw_keras3_still_fails_under_two_workers():
  # Upstream's bug, kept visible: when this fails, Keras fixed keras#20585 and
  # the workaround can go.
  # `python -I` ignores PYTHONPATH, where `tfdist launch` puts the shim that
  # enables the workaround in every task (tfdist.task._keras).
  result = _launch("keras3", "multi_worker_mirrored", "raw", python_flags=("-I",))
  assert result.returncode == 4, result.stdout[-3000:]
  assert "FAILED: ValueError: Attempt to convert a value (PerReplica" in result.stdout


@pytest.mark.slow
def test_keras3_fits_evaluates_and_predicts_under_two_workers():
  # `python -I`: without the task site's import hooks, as in a job `tfdist launch` did not
  # start. The script imports Keras 3 after make_strategy, which patches it on that import.
  result = _launch("keras3", "multi_worker_mirrored", python_flags=("-I",))
  assert result.returncode == 0, result.stdout[-3000:]
  losses = _per_worker(result.stdout, "TRAINED")
  assert set(losses) == {"worker:0", "worker:1"}
  assert losses["worker:0"] == losses["worker:1"]
  history = ast.literal_eval(losses["worker:0"].split("=", 1)[1])
  assert history[-1] < history[0]
  weights = _per_worker(result.stdout, "WEIGHTS")
  assert weights["worker:0"] == weights["worker:1"]  # Identical across workers.
  evaluated = _per_worker(result.stdout, "EVALUATED")
  assert evaluated["worker:0"] == evaluated["worker:1"]
  assert "predictions=(64, 1)" in evaluated["worker:0"]
  # Equal to tf_keras trained from the same weights under the same strategy.
  for difference in _per_worker(result.stdout, "TF_KERAS_DIFFERENCE").values():
    assert float(difference) < 1e-5
  # steps_per_execution=2 ran as 1, with one line saying why.
  assert "running 1 step per execution. Received: steps_per_execution=2" in result.stdout


@pytest.mark.slow
def test_an_untested_keras_is_refused_up_front_naming_its_version():
  result = _launch("keras3", "multi_worker_mirrored", "untested")
  assert result.returncode == 3, result.stdout[-3000:]
  assert "REFUSED: Keras 3 cannot fit under multi-worker MultiWorkerMirroredStrategy" \
      in result.stdout
  assert "is not applied to Keras 3." in result.stdout
  assert "`from tfdist import keras`" in result.stdout
  assert "Received: a Keras 3." in result.stdout


@pytest.mark.slow
def test_keras3_single_worker_needs_no_workaround():
  result = _launch("keras3", "multi_worker_mirrored", workers=1)
  assert result.returncode == 0, result.stdout[-3000:]
  assert "TRAINED" in result.stdout
  assert "step per execution" not in result.stdout
