"""tfdist.training.job: the default job trains under a strategy and reports numbers."""

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfdist.training import job
from tfdist.data import digits


def test_embedded_digits_split_is_fixed_and_real():
  (x_train, y_train), (x_test, y_test) = digits.load_digits()
  assert x_train.shape == (1437, 8, 8, 1) and x_test.shape == (360, 8, 8, 1)
  assert 0.0 <= x_train.min() and x_train.max() == 1.0
  assert set(np.unique(y_train)) == set(range(10))
  (again, _), _ = digits.load_digits()
  np.testing.assert_array_equal(x_train, again)


def test_embedded_digits_are_the_published_ones_without_scikit_learn():
  # The 1,797 images and labels scikit-learn ships as load_digits, byte for byte.
  with np.load(os.path.join(os.path.dirname(digits.__file__), "digits.npz")) as stored:
    images, labels = stored["images"], stored["labels"]
  assert images.shape == (1797, 8, 8) and images.dtype == np.uint8 and images.max() == 16
  assert np.bincount(labels).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
  assert hashlib.sha256((images / 16.0).astype(np.float32).tobytes()).hexdigest() == (
      "9f578524b6cec1fc800cc52dfc87ebe56264983d490aa72a4bd928ba2570ec77")
  assert hashlib.sha256(labels.astype(np.int32).tobytes()).hexdigest() == (
      "3a0e68456f9a3c609b399717dd9ca55bb9153be1bccf72e38e3319cb740c75cd")
  # They load where scikit-learn cannot be imported (with it, importing TensorFlow
  # imports it and SciPy: seconds of CPU in every task).
  code = ("import sys; sys.modules['sklearn'] = None; from tfdist.data import digits; "
          "(x, y), _ = digits.load_digits(); print(x.shape)")
  shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
  assert shown.returncode == 0, shown.stderr[-2000:]
  assert shown.stdout.split() == ["(1437,", "8,", "8,", "1)"], shown.stdout


@pytest.mark.slow
def test_mirrored_matches_one_device_on_the_default_job():
  config = job.TrainConfig(strategy="one_device", epochs=3, verbose=0)
  single = job.train(config)
  mirrored = job.train(job.TrainConfig(strategy="mirrored", epochs=3, verbose=0))
  assert mirrored.replicas == 2 and single.replicas == 1
  np.testing.assert_allclose(mirrored.losses, single.losses, rtol=1e-3)
  assert single.losses[-1] < single.losses[0]
  assert single.examples_per_second > 0 and single.step_time_ms > 0


@pytest.mark.slow
def test_keras3_trains_the_default_job_like_tf_keras():
  keras3 = job.train(job.TrainConfig(strategy="mirrored", epochs=3, verbose=0,
                                               keras="keras3"))
  assert keras3.keras == "keras3" and keras3.replicas == 2
  assert keras3.losses[-1] < 0.85 * keras3.losses[0]
  assert keras3.input_bound is not None  # The input report measures Keras 3 steps too.


def test_keras3_models_cannot_compress_gradients():
  with pytest.raises(ValueError, match=r"compress_gradients works with tf_keras optimizers "
                     r"only.*Received: a Keras 3 model"):
    job.train(job.TrainConfig(strategy="mirrored", epochs=1, verbose=0,
                                        keras="keras3", compress_gradients=True))


def test_dataset_fn_shards_by_input_pipeline():
  images = np.arange(8, dtype="float32").reshape(8, 1)
  labels = np.arange(8)
  fn = job.make_dataset_fn(images, labels, global_batch_size=4, seed=0)
  seen = []
  for pipeline in range(2):
    context = tf.distribute.InputContext(
        num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2)
    batch = next(iter(fn(context)))
    assert batch[0].shape == (2, 1)  # Per-replica batch: 4 / 2.
    seen.append(set(fn(context).take(4).unbatch().map(lambda x, y: y).as_numpy_iterator()))
  assert seen[0] == {0, 2, 4, 6} and seen[1] == {1, 3, 5, 7}


def test_steps_per_epoch_come_from_the_cardinality_and_only_else_from_one_pass(capsys):
  read = []

  def counted(x):
    read.append(1)  # Runs only when the data is read.
    return x

  known = lambda context: tf.data.Dataset.range(40).map(
      lambda x: tf.py_function(counted, [x], tf.int64)).batch(8)
  assert job._finite_steps(known) == 5
  assert read == [] and "reading it once" not in capsys.readouterr().out
  unknown = lambda context: tf.data.Dataset.range(40).filter(lambda x: x % 2 == 0).batch(8)
  assert job._finite_steps(unknown) == 3
  assert "length is unknown to TensorFlow; reading it once" in capsys.readouterr().out


@pytest.mark.slow
def test_on_fewer_workers_than_asked_the_learning_rate_stays_for_the_replicas_asked(
    monkeypatch, caplog):
  # One worker of the two asked for (tfdist launch --min_workers): its one
  # replica trains as the two would, with the linear scaling for two.
  monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["localhost:1"]}, '
                                  '"task": {"type": "worker", "index": 0}}')
  monkeypatch.setenv("TFDIST_WORKERS_ASKED", "2")
  shrunk = job.train(job.TrainConfig(strategy="one_device", epochs=1, verbose=0,
                                     lr_scaling="linear", learning_rate=1e-2))
  assert "tfdist: 1 of the 2 replicas asked for run now; the global batch stays 64 (64 per " \
      "replica), and the learning rate stays scaled for 2 replicas" in caplog.text
  monkeypatch.delenv("TFDIST_WORKERS_ASKED")
  doubled = job.train(job.TrainConfig(strategy="one_device", epochs=1, verbose=0,
                                      lr_scaling="none", learning_rate=2e-2))
  assert shrunk.losses == doubled.losses
  unscaled = job.train(job.TrainConfig(strategy="one_device", epochs=1, verbose=0,
                                       lr_scaling="linear", learning_rate=1e-2))
  assert unscaled.losses != shrunk.losses  # The check can fail: 1 replica, 1x.
