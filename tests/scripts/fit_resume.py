"""A 2-worker `fit` on shuffled data, stopped once by SIGTERM mid-epoch; prints RESULT.

Usage (once per task, TF_CONFIG, under `tfdist launch`):
  python fit_resume.py {keras3,tf_keras} DIR

600 examples, shuffled with a seed and reshuffled every epoch, global batch
64 (the last batch partial), 3 epochs, tfdist's BackupAndRestore in DIR
checking every batch. In its first run worker 1 sends itself SIGTERM at batch
4 of epoch 2: both workers back up at the same batch and exit 143; the job is
then started again. A DIR holding a file `stopped` runs uninterrupted. Worker 0
compares the weights with the same training, never interrupted, on one device.
"""

import json
import os
import signal
import sys

import numpy as np

import tfdist
from tfdist.training import checkpoints

flavour, checkpoint_dir = sys.argv[1:3]
strategy = tfdist.make_strategy("multi_worker_mirrored")

import tensorflow as tf

if flavour == "keras3":
  import keras
else:
  keras = tfdist.keras

rng = np.random.default_rng(0)
x = rng.random((600, 4)).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")).astype("float32")
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
marker = os.path.join(checkpoint_dir, "stopped")


class StopOnce(keras.callbacks.Callback):
  def on_epoch_begin(self, epoch, logs=None):
    self.epoch = epoch

  def on_train_batch_begin(self, batch, logs=None):
    if task == 1 and (self.epoch, batch) == (1, 3) and not os.path.exists(marker):
      open(marker, "w").close()
      os.kill(os.getpid(), signal.SIGTERM)


def fit(strategy, backed_up=True):
  keras.utils.set_random_seed(0)
  with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
  data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
      600, seed=7, reshuffle_each_iteration=True).batch(64)
  callbacks = [checkpoints.backup_and_restore(checkpoint_dir, check_every=1, model=model),
               StopOnce()] if backed_up else []
  history = model.fit(data, epochs=3, verbose=0, callbacks=callbacks)
  return model, history


model, history = fit(strategy)
weights = np.concatenate([w.ravel() for w in model.get_weights()])
result = {"epochs": len(history.history["loss"]), "weights": weights.tolist()}
if task == 0:  # The same batches on one device: 600 is 9 batches of 64 and 12 + 12.
  single, _ = fit(tf.distribute.OneDeviceStrategy("/cpu:0"), backed_up=False)
  reference = np.concatenate([w.ravel() for w in single.get_weights()])
  result["relative_difference"] = float(np.abs(weights - reference).max()
                                        / np.abs(reference).max())
print("RESULT " + json.dumps(result), flush=True)
