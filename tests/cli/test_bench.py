"""`tfdist bench`: the ratios are measured and written, never asserted as speeds."""

import json

import pytest

import helpers


@pytest.mark.slow
def test_cli_writes_one_key_per_ratio(tmp_path):
  out = tmp_path / "bench.json"
  result = helpers.run(helpers.tfdist_cli(
      "bench", "--suites=small_model", "--suites=allreduce", "--repeats=1", "--steps=10",
      "--sizes_mb=1", f"--output={out}"), timeout=600)
  assert result.returncode == 0, result.stdout[-3000:]
  written = json.loads(out.read_text())
  assert set(written) == {
      "small_model_raw_mirrored_over_plain_wall", "small_model_raw_mirrored_over_plain_cpu",
      "small_model_tfdist_mirrored_over_plain_wall",
      "small_model_tfdist_mirrored_over_plain_cpu",
      "allreduce_loopback_gbps", "allreduce_busbw_over_tcp_raw_1mb",
      "allreduce_busbw_over_tcp_tfdist_1mb", "allreduce_busbw_over_tcp_tfdist_fp16_1mb",
      "allreduce_wire_busbw_over_tcp_raw_1mb", "allreduce_wire_busbw_over_tcp_tfdist_1mb",
      "allreduce_wire_busbw_over_tcp_tfdist_fp16_1mb"}
  assert all(value > 0 for value in written.values())
  # fp16 sends half the bytes it reduces: its wire figure is half its effective one.
  assert written["allreduce_wire_busbw_over_tcp_tfdist_fp16_1mb"] == pytest.approx(
      written["allreduce_busbw_over_tcp_tfdist_fp16_1mb"] / 2)
  assert "bus bandwidth / loopback TCP" in result.stdout


@pytest.mark.slow
def test_cli_scaling_suite_reports_examples_per_second(tmp_path):
  out = tmp_path / "bench.json"
  result = helpers.run(helpers.tfdist_cli(
      "bench", "--suites=scaling", "--scale_models=cnn:64", "--scale_steps=5", "--scale_pairs=1",
      f"--output={out}"), timeout=900)
  assert result.returncode == 0, result.stdout[-3000:]
  written = json.loads(out.read_text())
  assert set(written) == {
      "scaling_cnn_examples_per_second_1", "scaling_cnn_examples_per_second_2",
      "scaling_cnn_efficiency_2_measured", "scaling_cnn_efficiency_2_predicted",
      "scaling_cnn_collectives_per_step_raw", "scaling_cnn_collectives_per_step_tfdist",
      "scaling_cnn_efficiency_2_raw", "scaling_cnn_sync_ratio"}
  assert all(value > 0 for value in written.values())
  assert written["scaling_cnn_collectives_per_step_tfdist"] < \
      written["scaling_cnn_collectives_per_step_raw"]
  assert "2 workers / 1, each pinned to a core" in result.stdout


def test_cli_scale_models_must_name_a_batch():
  result = helpers.run(helpers.tfdist_cli("bench", "--suites=scaling",
                                          "--scale_models=convnet"), timeout=120)
  assert result.returncode != 0
  assert "--scale_models takes model:per-replica batch, e.g. convnet:256. " \
         "Received: 'convnet'" in result.stdout
