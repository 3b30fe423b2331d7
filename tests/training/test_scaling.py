"""tfdist.training.scaling: global batch and learning-rate rules."""

import math

import numpy as np
import pytest

import tfdist
from tfdist import keras
from tfdist.training import scaling


def test_global_and_per_replica_batch():
  assert scaling.global_batch_size(64, 2) == 128
  assert scaling.global_batch_size(32, tfdist.make_strategy("mirrored")) == 64
  assert scaling.per_replica_batch_size(128, 2) == 64


@pytest.mark.parametrize("call, match", [
    (lambda: scaling.per_replica_batch_size(65, 2),
     r"must be a positive multiple of the 2 replicas.*use e.g. 64. Received: global_batch_size=65"),
    (lambda: scaling.per_replica_batch_size(1, 2), r"Received: global_batch_size=1"),
    (lambda: scaling.global_batch_size(0, 2), r"`per_replica_batch_size` must be an integer >= 1"),
    (lambda: scaling.global_batch_size(8, 0), r"`num_replicas` must be an integer >= 1"),
    (lambda: scaling.scale_learning_rate(0.1, 2, rule="cubic"),
     r"`rule` must be one of \['linear', 'sqrt', 'none'\]. Received: 'cubic'"),
    (lambda: scaling.scale_learning_rate(0, 2), r"`base_learning_rate` must be > 0"),
    (lambda: scaling.WarmUp(0.1, 0.2, warmup_steps=-1), r"`warmup_steps` must be an integer"),
])
def test_errors(call, match):
  with pytest.raises(ValueError, match=match):
    call()


def test_learning_rate_rules():
  assert scaling.scale_learning_rate(0.1, 4, "linear") == pytest.approx(0.4)
  assert scaling.scale_learning_rate(0.1, 4, "sqrt") == pytest.approx(0.2)
  assert scaling.scale_learning_rate(0.1, 4, "none") == pytest.approx(0.1)
  assert scaling.scale_learning_rate(0.1, 9, "sqrt") == pytest.approx(0.1 * math.sqrt(9))


def test_warm_up_ramps_linearly_then_holds():
  lr = scaling.scale_learning_rate(0.1, 4, rule="linear", warmup_steps=10)
  values = [float(lr(step)) for step in (0, 5, 10, 100)]
  np.testing.assert_allclose(values, [0.1, 0.25, 0.4, 0.4], rtol=1e-6)
  assert scaling.scale_learning_rate(0.1, 4) == pytest.approx(0.4)


def test_warm_up_into_a_schedule():
  decay = keras.optimizers.schedules.ExponentialDecay(0.4, decay_steps=10, decay_rate=0.5)
  lr = scaling.WarmUp(0.1, target=decay, warmup_steps=10)
  assert float(lr(10)) == pytest.approx(0.4)
  assert float(lr(20)) == pytest.approx(0.2)  # The schedule counts from the warm-up's end.


def test_warm_up_trains_and_serializes():
  lr = scaling.WarmUp(0.01, target=0.05, warmup_steps=4)
  assert scaling.WarmUp(**lr.get_config()).get_config() == lr.get_config()
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
  model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse")
  x = np.random.default_rng(0).random((64, 2)).astype("float32")
  history = model.fit(x, x.sum(1), epochs=5, verbose=0)
  assert history.history["loss"][-1] < history.history["loss"][0]


def test_steps_per_execution_amortises_only_with_replicas():
  assert scaling.steps_per_execution(tfdist.make_strategy("mirrored")) == 10
  assert scaling.steps_per_execution(tfdist.make_strategy("one_device")) == 1


def test_warm_up_into_a_schedule_round_trips_through_its_config(tmp_path):
  # Before: from_config got the target schedule as a dict and failed.
  decay = keras.optimizers.schedules.CosineDecay(0.4, decay_steps=100, alpha=0.05)
  lr = scaling.WarmUp(0.1, target=decay, warmup_steps=10)
  again = scaling.WarmUp.from_config(lr.get_config())
  for step in (0, 5, 10, 50, 200):
    assert float(again(step)) == pytest.approx(float(lr(step)))
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
  model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse")
  model.save(tmp_path / "model.keras")
  loaded = keras.models.load_model(tmp_path / "model.keras")
  schedule = keras.optimizers.schedules.deserialize(
      loaded.optimizer.get_config()["learning_rate"])
  assert isinstance(schedule, scaling.WarmUp)
  assert float(schedule(50)) == pytest.approx(float(lr(50)))


def test_warm_up_into_a_schedule_ramps_to_its_first_value():
  # Before: the ramp aimed at the schedule's value at negative steps. Now it
  # equals tf_keras's own CosineDecay with warmup_target, which `tfdist train` uses.
  keras_lr = keras.optimizers.schedules.CosineDecay(0.01, decay_steps=17, alpha=0.05,
                                                    warmup_target=0.02, warmup_steps=5)
  ours = scaling.WarmUp(0.01, target=keras.optimizers.schedules.CosineDecay(
      0.02, decay_steps=17, alpha=0.05), warmup_steps=5)
  for step in (0, 3, 5, 10, 22, 40):
    assert float(ours(step)) == pytest.approx(float(keras_lr(step)), rel=1e-5), step
