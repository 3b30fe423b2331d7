"""tfdist.training.saved_model: a SavedModel for serving, written once, from any strategy."""

import json
import os
import stat
import re
import sys

import numpy as np
import pytest

import helpers
import tfdist
from tfdist import keras
from tfdist.training import saved_model

X = np.random.default_rng(0).random((9, 8, 8, 1)).astype("float32")


def served_differences(tmp_path, exports, x=X):
  """Loads each (SavedModel, expected outputs of `x`) in a fresh process without tfdist."""
  np.save(tmp_path / "x.npy", x)
  args = []
  for i, (path, expected) in enumerate(exports):
    np.save(tmp_path / f"want{i}.npy", expected)
    args += [path, str(tmp_path / f"want{i}.npy")]
  # -I: no PYTHONPATH, no user site; tfdist is importable but nothing imports it.
  result = helpers.run([sys.executable, "-I", os.path.join(helpers.SCRIPTS,
                        "load_saved_model.py"), str(tmp_path / "x.npy"), *args], timeout=120)
  assert result.returncode == 0, result.stdout[-3000:]
  loaded = json.loads(re.search(r"^RESULT (.*)$", result.stdout, re.M).group(1))
  assert loaded["tfdist"] is False
  return loaded["differences"]


def classifier(package=keras):
  return package.Sequential([package.Input((8, 8, 1)), package.layers.Conv2D(4, 3),
                             package.layers.BatchNormalization(), package.layers.Flatten(),
                             package.layers.Dense(10)])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["one_device", "mirrored", "central_storage"])
def test_single_machine_strategies_export_what_predict_gives(tmp_path, name):
  import keras as keras3
  strategy = tfdist.make_strategy(name)
  exports = []
  for package in (keras, keras3):
    with strategy.scope():
      model = classifier(package)
      model.compile(optimizer="sgd", loss="mse")
    # Moves the batch-norm statistics (whole batches: see docs/known_issues.md).
    model.fit(X[:8], np.zeros((8, 10), "float32"), batch_size=8, epochs=1, verbose=0)
    path = saved_model.export(model, str(tmp_path / package.__name__))
    assert path == str(tmp_path / package.__name__ / "1")
    assert os.listdir(tmp_path / package.__name__) == ["1"]  # No partial folder left.
    # The model called directly reads each variable as saved: batch-norm statistics
    # averaged over replicas, where `predict` uses each replica's own.
    exports.append((path, np.asarray(model(X))))
  assert max(served_differences(tmp_path, exports)) <= 1e-6


def test_versions_are_numbered_and_never_overwritten(tmp_path):
  model = classifier()
  assert saved_model.export(model, str(tmp_path / "exports")).endswith("/1")
  assert stat.S_IMODE((tmp_path / "exports").stat().st_mode) == 0o700  # Made here: private.
  assert saved_model.export(model, str(tmp_path)).endswith("/1")
  assert saved_model.export(model, str(tmp_path)).endswith("/2")
  assert saved_model.export(model, str(tmp_path), version=10).endswith("/10")
  assert saved_model.next_version(str(tmp_path)) == 11
  with pytest.raises(ValueError, match=r"Version 2 exists already in .*a served version is "
                     r"never overwritten.*Received: version=2"):
    saved_model.export(model, str(tmp_path), version=2)
  with pytest.raises(ValueError, match=r"`version` must be an integer >= 1.*Received: "
                     r"version='3'"):
    saved_model.export(model, str(tmp_path), version="3")


def test_a_failed_export_leaves_no_version_and_no_partial_folder(tmp_path):
  unbuilt = keras.Sequential([keras.layers.Dense(2)])  # Nothing to trace a signature from.
  with pytest.raises(ValueError):
    saved_model.export(unbuilt, str(tmp_path))
  assert os.listdir(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("shards", [1, 2])
def test_parameter_server_models_export_with_one_and_two_shards(tmp_path, shards):
  result = helpers.run([sys.executable, os.path.join(helpers.SCRIPTS, "export_pss.py"),
                        str(shards), str(tmp_path)], timeout=240)
  assert result.returncode == 0, result.stdout[-3000:]
  exported = json.loads(re.search(r"^RESULT (.*)$", result.stdout, re.M).group(1))
  assert exported["tf_keras"]["sharded"] is exported["keras3"]["sharded"] is (shards == 2)
  exports = [(exported[name]["path"], np.load(tmp_path / f"{name}.npy"))
             for name in ("tf_keras", "keras3")]
  assert max(served_differences(tmp_path, exports, np.load(tmp_path / "x.npy"))) <= 1e-6


@pytest.mark.slow
def test_two_workers_export_one_version_that_serves_the_trained_model(tmp_path):
  export_dir, checkpoint_dir = tmp_path / "export", tmp_path / "checkpoint"
  result = helpers.run(helpers.tfdist_cli(
      "train", "--strategy=multi_worker_mirrored", "--epochs=2", "--verbose=0",
      f"--export_dir={export_dir}", f"--checkpoint_dir={checkpoint_dir}"), timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  # Written once, by the chief (worker 0); worker 1's copy is gone.
  assert re.findall(r"\[(worker:\d)\] exported a SavedModel for serving to (\S+)",
                    result.stdout) == [("worker:0", str(export_dir / "1"))]
  assert os.listdir(export_dir) == ["1"]
  trained = keras.models.load_model(checkpoint_dir / "model.keras")
  x = np.random.default_rng(1).random((16, 8, 8, 1)).astype("float32")
  (difference,) = served_differences(tmp_path, [(str(export_dir / "1"),
                                                 trained.predict(x, verbose=0))], x)
  assert difference <= 1e-6
