"""`tfdist bench`: the ratios are measured and written, never asserted as speeds."""

import json
import os
import re

import pytest

import helpers


@pytest.mark.slow
def test_cli_writes_one_key_per_ratio(tmp_path):
  out = tmp_path / "bench.json"
  result = helpers.run(helpers.tfdist_cli(
      "bench", "--suites=small_model,allreduce", "--repeats=1", "--steps=10",
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
  # Which suite of how many runs, and from the second on the time so far and left.
  assert "\n[1/2] suite small_model...\n" in result.stdout, result.stdout[-3000:]
  assert re.search(rf"^\[2/2\] suite allreduce\.\.\. \({helpers.DURATION} in all, about "
                   rf"{helpers.DURATION} left\)$", result.stdout, re.M), result.stdout[-3000:]


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


@pytest.mark.slow
def test_cli_serving_suite_writes_tf_servings_batching_file(tmp_path):
  out, batching = tmp_path / "bench.json", tmp_path / "batching.txt"
  scratch = tmp_path / "tmp"  # The servers' specs go here: their command lines name it.
  scratch.mkdir()
  result = helpers.run(helpers.tfdist_cli(
      "bench", "--suites=serving", "--serving_max_batch_sizes=4",
      "--serving_batch_timeouts_micros=0,1000", "--serving_processes=1,2",
      "--serving_clients=2", "--serving_requests=10", "--latency_target_ms=60000",
      f"--batching_parameters_out={batching}", f"--output={out}"), timeout=300,
      env={"TMPDIR": str(scratch)})
  assert result.returncode == 0, result.stdout[-3000:]
  written = json.loads(out.read_text())
  assert written["serving_model_2p_2c_4x1000_requests_per_second"] > 0
  assert written["serving_trivial_1p_2c_4x0_p99_ms"] > 0
  # No server outlived the command: their process groups were killed.
  assert not [pid for pid in os.listdir("/proc") if pid.isdigit()
              and str(scratch) in _command_line(pid)]
  chosen = max(((p, t) for p in (1, 2) for t in (1000, 0)),
               key=lambda c: written[f"serving_model_{c[0]}p_2c_4x{c[1]}_requests_per_second"])[1]
  assert batching.read_text() == (f"max_batch_size {{ value: 4 }}\n"
                                  f"batch_timeout_micros {{ value: {chosen} }}\n"
                                  "max_enqueued_batches { value: 100 }\n"
                                  "num_batch_threads { value: 1 }\n")
  assert "The trivial model's p50 / the model's" in result.stdout


def _command_line(pid: str) -> str:
  try:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
      return f.read().decode(errors="replace")
  except OSError:  # Gone meanwhile, or not ours to read.
    return ""


def test_cli_batching_file_needs_a_latency_target():
  result = helpers.run(helpers.tfdist_cli("bench", "--suites=serving",
                                          "--batching_parameters_out=/tmp/x"), timeout=120)
  assert result.returncode != 0
  assert "--batching_parameters_out needs --latency_target_ms" in result.stdout


def test_cli_latency_target_must_be_positive():
  result = helpers.run(helpers.tfdist_cli("bench", "--suites=serving", "--latency_target_ms=0"),
                       timeout=120)
  assert result.returncode != 0
  assert "--latency_target_ms must be > 0 (a p99 latency in milliseconds). Received: 0" \
      in result.stdout


def test_cli_suites_take_commas_and_repeats_and_name_the_valid_ones():
  # A repeated --suites adds to the list (absl's list flags keep the last alone).
  result = helpers.run(helpers.tfdist_cli("bench", "--suites=small_model,overhead",
                                          "--suites", "nope"), timeout=120)
  assert result.returncode != 0
  assert ("--suites takes any of ['overhead', 'small_model', 'allreduce', 'scaling', 'advise', "
          "'serving'], comma-separated. Received: ['small_model', 'overhead', 'nope']") \
      in result.stdout
