"""tfdist.advice.scaling_model: the α-β model of a synchronous step."""

import pytest

from tfdist.advice import scaling_model


def test_prediction_follows_the_ring_formula():
  one, two, four = scaling_model.predict(0.010, 1e6, 1e8, [1, 2, 4])
  assert one.efficiency == 1.0 and one.step_seconds == 0.010
  assert two.step_seconds == pytest.approx(0.010 + 1e6 * 2 * 1 / 2 / 1e8)
  assert four.step_seconds == pytest.approx(0.010 + 1e6 * 2 * 3 / 4 / 1e8)
  assert 1.0 > two.efficiency > four.efficiency


def test_latency_is_the_communication_the_bytes_do_not_explain():
  # 1 MB over 2 workers at 1e8 B/s: 10 ms of bytes.
  assert scaling_model.latency_seconds(0.013, 1e6, 1e8) == pytest.approx(0.003)
  assert scaling_model.latency_seconds(0.008, 1e6, 1e8) == 0.0


def test_latency_grows_with_the_ring_round_trips():
  one, two, four = scaling_model.predict(0.010, 1e6, 1e8, [1, 2, 4], latency_seconds=0.002)
  assert one.step_seconds == 0.010
  assert two.step_seconds == pytest.approx(0.010 + 0.002 + 1e6 / 1e8)
  assert four.step_seconds == pytest.approx(0.010 + 3 * 0.002 + 1e6 * 2 * 3 / 4 / 1e8)


def test_advice_offers_fp16_only_when_bytes_dominate():
  bytes_bound = scaling_model.advice(0.010, 7 * 2**20, 0.3e9, latency_seconds=0.001)
  latency_bound = scaling_model.advice(0.010, 20 * 2**10, 0.3e9, latency_seconds=0.005)
  assert "compress_gradients" in bytes_bound
  assert "compress_gradients" not in latency_bound and "larger per-replica batch" in latency_bound


def test_advice_says_when_two_workers_lose():
  text = scaling_model.advice(compute_seconds=0.010, gradient_bytes=7 * 2**20, busbw=0.3e9)
  assert "gradients are 7.0 MB per step" in text and "2 workers will be slower than 1" in text
  text = scaling_model.advice(compute_seconds=0.030, gradient_bytes=20 * 2**10, busbw=1e8)
  assert "gradients are 20 KB per step" in text and "expect 99% efficiency on 2 workers" in text


def test_bad_input_is_named():
  with pytest.raises(ValueError, match=r"Need replicas >= 1, busbw > 0.*Received: replicas=2, "
                     r"busbw=0"):
    scaling_model.communication_seconds(1.0, 0, 2)
  with pytest.raises(ValueError, match=r"`latency_seconds` must be >= 0. Received: -0.1"):
    scaling_model.predict(0.01, 1e6, 1e8, [2], latency_seconds=-0.1)


def test_plot_writes_a_png(tmp_path):
  path = scaling_model.plot(str(tmp_path / "curve.png"),
                               scaling_model.predict(0.01, 1e6, 1e8, [1, 2, 4]))
  with open(path, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
