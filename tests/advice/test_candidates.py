"""tfdist.advice._candidates: the ways `tfdist advise` times, on this process's 2 logical CPUs."""

import pytest

from tfdist.advice import _candidates as candidates


@pytest.mark.slow
def test_the_check_times_fits_longer_times_as_long_of_the_same_model(counting_model_fn):
  model_fn, made = counting_model_fn
  timers = candidates.step_timer(model_fn, "mirrored", batch_size=8, steps=5, longer=3)
  assert sorted(timers) == ["check", "step"]
  model = made[-1]
  steps = []
  for kind in ("step", "check"):
    before = int(model.optimizer.iterations.numpy())
    assert timers[kind]() > 0
    steps.append(int(model.optimizer.iterations.numpy()) - before)
  # At least 5 steps, more if 5 would take under MIN_FIT_SECONDS; the check 3x that.
  assert steps[0] >= 5 and steps[1] == 3 * steps[0]


@pytest.mark.slow
def test_time_ways_reports_the_check_beside_the_advice_s_steps(counting_model_fn):
  model_fn, _ = counting_model_fn
  ways = {"one_device": ("one_device", 8), "mirrored": ("mirrored", 8)}
  seconds = candidates.time_ways(model_fn, ways, steps=5, repeats=1, longer=2)
  assert sorted(seconds) == ["check", "step"]
  assert all(sorted(seconds[kind]) == sorted(ways) for kind in seconds)
  assert all(s > 0 for kind in seconds for s in seconds[kind].values())
  assert list(candidates.time_ways(model_fn, {"one_device": ("one_device", 8)}, steps=5,
                                   repeats=1)) == ["step"]


def test_an_unknown_way_is_refused_with_the_ones_it_takes(counting_model_fn):
  with pytest.raises(ValueError, match=r"must be one of .*'model_parallel'.*"
                                       r"Received: 'pipeline'"):
    candidates.step_timer(counting_model_fn[0], "pipeline", batch_size=8, steps=5)
