"""tfdist.training.sidecar: an evaluator task evaluates the chief's epoch checkpoints."""

import glob
import re

import numpy as np
import pytest
import tensorflow as tf

import helpers
from tfdist import keras
from tfdist.training import sidecar


def evaluation_summaries(log_dir):
  """(step, tag, value) of every evaluation result written to TensorBoard."""
  found = []
  for path in sorted(glob.glob(f"{log_dir}/validation/events*")):
    for record in tf.data.TFRecordDataset(path):
      event = tf.compat.v1.Event.FromString(record.numpy())
      for value in event.summary.value:
        found.append((event.step, value.tag, float(tf.make_ndarray(value.tensor))))
  return found


@pytest.mark.slow
def test_two_workers_and_an_evaluator_one_result_per_checkpoint(tmp_path):
  result = helpers.run(helpers.tfdist_cli(
      "train", "--strategy=multi_worker_mirrored", "--epochs=3", "--evaluator",
      f"--checkpoint_dir={tmp_path}", "--verbose=0"), timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  assert "[evaluator:0] sidecar evaluator: evaluated epoch 3's checkpoint" in result.stdout
  accuracies = [(step, value) for step, tag, value in evaluation_summaries(tmp_path / "eval")
                if tag == "evaluation_accuracy_vs_iterations"]
  # Every epoch's checkpoint, once, in order (22 steps an epoch).
  assert [step for step, _ in accuracies] == [22, 44, 66]
  trained = float(re.search(r"\[worker:0\] strategy=.* accuracy=([\d.]+)", result.stdout).group(1))
  assert accuracies[-1][1] == pytest.approx(trained, abs=1e-4)  # The same weights, same data.


@pytest.mark.slow
def test_evaluator_needs_a_checkpoint_dir_and_a_cluster():
  result = helpers.run(helpers.tfdist_cli("train", "--strategy=multi_worker_mirrored",
                                          "--evaluator"), timeout=60)
  assert result.returncode == 2
  assert re.search(r"`evaluator` adds an evaluator task .* give both. Received: "
                   r"strategy='multi_worker_mirrored', checkpoint_dir=None", result.stdout)
  result = helpers.run(helpers.tfdist_cli("train", "--strategy=multi_worker_mirrored",
                                          "--evaluator", "--checkpoint_dir=ckpt",
                                          "--in_process"), timeout=60)
  assert result.returncode == 1  # A flag error, before anything starts.
  assert ("flags evaluator=True, in_process=True: --evaluator adds an evaluator task to the "
          "local cluster, and --in_process runs no cluster: drop one.") in result.stdout


def test_keras3_and_uncompiled_models_are_refused(tmp_path):
  import keras as keras3
  with pytest.raises(ValueError, match=r"Keras 3 has no counterpart.*Received: a Keras 3 model"):
    sidecar.checkpoint_callback(str(tmp_path), keras3.Sequential([keras3.Input((2,)),
                                                                   keras3.layers.Dense(1)]))
  uncompiled = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
  with pytest.raises(ValueError, match=r"must be compiled.*Received: an uncompiled Sequential"):
    sidecar.evaluate_checkpoints(uncompiled, (np.zeros((4, 2)), np.zeros(4)), str(tmp_path),
                                 last_epoch=1)
