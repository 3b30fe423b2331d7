"""benchmarks/input_pipeline.py: every variant runs and every ratio is written; no speed is asserted."""

import json
import os

import pytest

import helpers

SCRIPT = os.path.join(helpers.REPO, "benchmarks", "input_pipeline.py")
# The script's hand-tuned grid (map threads, prefetch batches). Not imported:
# its absl flags would clash with tfdist's mains in this process.
HAND_TUNED = [f"hand-tuned {threads}/{depth}"
              for threads, depth in ((os.cpu_count(), 2), (2 * os.cpu_count(), 4))]


@pytest.mark.slow
def test_writes_one_key_per_ratio(tmp_path):
  out = tmp_path / "input_pipeline.json"
  result = helpers.run(helpers.python(SCRIPT, "--images=32", "--repeats=1", f"--output={out}"),
                       timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  written = json.loads(out.read_text())
  variants = {"naive", "tf defaults", "autotune", "tfdist", "tfdist, stateful map",
              "tfdist, crop in decode", *HAND_TUNED}
  assert set(written["image_per_second"]) == variants
  assert set(written["image_cores_busy"]) == variants
  assert all(0 < cores <= os.cpu_count() + 0.5 for cores in written["image_cores_busy"].values())
  ratios = {"image_tf_defaults_vs_naive", "image_autotune_vs_naive", "image_tfdist_vs_naive",
            "image_tfdist_vs_best_hand_tuned", "image_tfdist_vs_autotune",
            "image_tfdist_stateful_map_vs_best_hand_tuned", "image_tfdist_stateful_map_vs_naive",
            "image_tfdist_crop_in_decode_vs_best_hand_tuned",
            "cheap_tfdist_vs_naive",
            *(f"image_{name.replace('-', '_').replace(' ', '_').replace('/', '_')}_vs_naive"
              for name in HAND_TUNED)}
  assert ratios <= set(written)
  assert all(written[key] > 0 for key in ratios)
  assert written["image_best_hand_tuned"] in HAND_TUNED
  assert 0 <= written["cnn_input_wait_share"] <= 1
  assert "tfdist vs the best hand-tuned" in result.stdout
