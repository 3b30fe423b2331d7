"""tfdist.advice._advice_check: an advice held to longer measurements of every way it ranked."""

import pytest

from tfdist.advice import _advice_check as advice_check
from tfdist.advice import decision
from tfdist.advice import memory

MB = 2**20
CONVNET = memory.Footprint(weights=1 * MB, gradients=1 * MB, slots=2 * MB, activations=4 * MB)


def measurements(step, links=None):
  return decision.Measurements(batch_size=64, footprint=CONVNET, step=step, links=links)


def test_check_holds_the_pick_and_the_predictions_to_the_measurement():
  m = measurements({"one_device": 0.010, "mirrored": 0.015})
  advice = decision.decide(m, decision.Cluster(devices_per_worker=2))  # mirrored: 8533/s.
  check = advice_check.check(advice, {"mirrored": 8000.0, "one_device": 6300.0})
  assert check.passed and check.fastest == "mirrored" and check.pick_share == 1.0
  assert check.errors["mirrored"] == pytest.approx(128 / 0.015 / 8000 - 1)
  assert "PASS" in str(check)
  # The pick measured 10% slower than one device: the advice failed.
  failed = advice_check.check(advice, {"mirrored": 6000.0, "one_device": 6600.0})
  assert not failed.passed and failed.fastest == "one_device" and "FAIL" in str(failed)
  # A prediction 20% off fails too, however good the pick.
  assert not advice_check.check(advice, {"mirrored": 7000.0, "one_device": 5000.0}).passed


def test_check_of_a_pick_predicted_for_another_cluster_says_it_was_not_checked():
  # 16 workers on a network: the pick is a prediction nothing here can run.
  m = measurements({"one_device": 0.040}, links=decision.Links(busbw=10e9, latency=0.0005))
  advice = decision.decide(m, decision.Cluster(workers=16, colocated=False))
  assert advice.pick.name == "multi_worker_mirrored"
  check = advice_check.check(advice, {"one_device": 1500.0})
  assert check.pick_share is None and check.fastest == "one_device"
  assert not check.passed and list(check.errors) == ["one_device"]
  assert str(check).endswith("pick multi_worker_mirrored: not checked (predicted for a cluster "
                             "this machine does not run); worst prediction error 7% (targets: "
                             "pick within 5%, predictions within 15%): NOT CHECKED")
  # A local way measured 20% off is still a failure.
  assert str(advice_check.check(advice, {"one_device": 1333.0})).endswith("FAIL")


def test_check_with_no_way_that_fits_names_no_fastest():
  tiny = 1024  # Bytes per device: nothing fits, not even split over the devices.
  m = measurements({"one_device": 0.010, "mirrored": 0.015})
  advice = decision.decide(m, decision.Cluster(devices_per_worker=2, memory_per_device=tiny))
  assert advice.pick is None
  check = advice_check.check(advice, {"one_device": 6400.0, "mirrored": 8500.0})
  assert check.fastest is None and check.pick_share is None and not check.passed
  assert "nothing fits" in str(check)
