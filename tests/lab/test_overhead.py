"""tfdist._lab.overhead and models: raw and tfdist strategies timed side by side."""

import pytest

import tfdist
from tfdist._lab import allreduce
from tfdist.training import timing
from tfdist._lab import models
from tfdist._lab import overhead


@pytest.mark.slow
def test_strategy_overhead_rows():
  rows = overhead.strategy_overhead(["mirrored"], ["mlp"], repeats=1, steps=10)
  assert [(r["model"], r["strategy"]) for r in rows] == [("mlp", "mirrored")]
  for name in timing.CLOCKS:
    assert rows[0][name]["ratio"] > 0 and rows[0][name]["a_ms"] > 0


def test_models_build_for_their_input_shapes():
  for name, (model_fn, shape) in models.MODELS.items():
    model = model_fn()
    assert model.input_shape[1:] == shape, name
  # The compute-bound CNN synchronises ~0.9 MB per step, like its docstring says.
  assert models.convnet().count_params() * 4 == pytest.approx(0.85 * allreduce.MB, rel=0.01)


def test_raw_strategy_names():
  with pytest.raises(ValueError, match=r"No raw counterpart for 'parameter_server'.*"
                     r"Received: 'parameter_server'"):
    overhead.raw_strategy("parameter_server")


@pytest.mark.parametrize("name", ["mirrored", "central_storage"])
def test_raw_strategies_use_the_same_devices_as_tfdist(name):
  raw, ours = overhead.raw_strategy(name), tfdist.make_strategy(name)
  assert raw.num_replicas_in_sync == ours.num_replicas_in_sync == 2
  assert raw.extended.worker_devices == ours.extended.worker_devices
