"""tfdist.bench and `tfdist bench`: the ratios are measured and written, never asserted as speeds."""

import json

import pytest

import helpers
import tfdist
from tfdist import bench


def test_steps_per_execution_amortises_only_with_replicas():
  assert bench.steps_per_execution(tfdist.make_strategy("mirrored")) == 10
  assert bench.steps_per_execution(tfdist.make_strategy("one_device")) == 1


def test_interleaved_ratio_is_the_median_of_pairs():
  a, b = iter([1.0, 1.0, 1.0]), iter([2.0, 3.0, 10.0])
  result = bench.interleaved_ratio(lambda: next(a), lambda: next(b), repeats=3)
  assert result["ratio"] == 3.0 and result["a_ms"] == 1000.0


def test_strategy_overhead_rows():
  rows = bench.strategy_overhead(["mirrored"], ["mlp"], repeats=1, steps=10)
  assert [(r["model"], r["strategy"]) for r in rows] == [("mlp", "mirrored")]
  assert rows[0]["ratio"] > 0 and rows[0]["raw_ms"] > 0


def test_raw_strategy_names():
  with pytest.raises(ValueError, match=r"No raw counterpart for 'parameter_server'.*"
                     r"Received: 'parameter_server'"):
    bench.raw_strategy("parameter_server")


def test_loopback_bandwidth_is_positive():
  assert bench.loopback_bandwidth(megabytes=8) > 1e6


@pytest.mark.slow
def test_cli_writes_one_key_per_ratio(tmp_path):
  out = tmp_path / "bench.json"
  result = helpers.run(helpers.tfdist_cli(
      "bench", "--suites=small_model", "--suites=allreduce", "--repeats=1", "--steps=10",
      "--sizes_mb=1", f"--output={out}"), timeout=600)
  assert result.returncode == 0, result.stdout[-3000:]
  written = json.loads(out.read_text())
  assert set(written) == {
      "small_model_raw_mirrored_over_plain", "small_model_tfdist_mirrored_over_plain",
      "allreduce_loopback_gbps", "allreduce_busbw_over_tcp_fp32_1mb",
      "allreduce_busbw_over_tcp_fp16_1mb"}
  assert all(value > 0 for value in written.values())
  assert "bus bandwidth / loopback TCP" in result.stdout
