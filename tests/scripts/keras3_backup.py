"""Keras 3 under 2-worker MultiWorkerMirrored: backup, interruption, resume, save once.

Usage: python keras3_backup.py DIR {interrupt,resume}
`interrupt` stops both workers with an error at the start of epoch 2; `resume`
runs the same fit again, which must start at epoch 2, and saves the model.
"""

import os
import sys

import keras
import numpy as np
import tensorflow as tf

import tfdist
from tfdist.training import checkpoints

directory, phase = sys.argv[1], sys.argv[2]
strategy = tfdist.make_strategy("multi_worker_mirrored")
x = np.random.default_rng(0).random((64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
keras.utils.set_random_seed(0)
with strategy.scope():
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
  model.compile(optimizer="sgd", loss="mse")


class Interrupt(keras.callbacks.Callback):
  def on_epoch_begin(self, epoch, logs=None):
    print(f"EPOCH: {epoch}", flush=True)
    if phase == "interrupt" and epoch == 2:
      raise RuntimeError("interrupted")


data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)
backup = checkpoints.backup_and_restore(directory, model=model)
try:
  model.fit(data, epochs=4, steps_per_epoch=2, verbose=0, callbacks=[backup, Interrupt()])
except RuntimeError as e:
  print(f"STOPPED: {e}; backup files: {sorted(os.listdir(backup.backup_dir))}", flush=True)
  sys.exit(0)
saved = checkpoints.save_model(model, os.path.join(directory, "model.keras"))
print(f"SAVED: {saved}", flush=True)
