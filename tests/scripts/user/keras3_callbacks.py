"""A Keras 3 multi-worker script as Keras's guides write it: no tfdist, Keras's own
BackupAndRestore, ModelCheckpoint and TensorBoard, all in one folder shared by the workers.

Usage: python keras3_callbacks.py DIR [--kill-at=EPOCH:BATCH] [--save_freq=N]
`--kill-at` SIGKILLs worker 1 at that batch of its first run (a marker file in
DIR says it did); a run under `--max_restarts=1` must resume from Keras's backup.
Prints `WEIGHTS: <sum> <first values>` at the end, on every worker.
"""

import os
import signal
import sys

import keras
import numpy as np
import tensorflow as tf

directory = sys.argv[1]
options = dict(a.lstrip("-").split("=", 1) for a in sys.argv[2:])
save_freq = int(options["save_freq"]) if "save_freq" in options else "epoch"
kill_at = tuple(int(v) for v in options["kill-at"].split(":")) if "kill-at" in options else None

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.random((96, 8)).astype("float32")
y = (x @ rng.random((8, 1))).astype("float32")
keras.utils.set_random_seed(0)
data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(96, seed=1).batch(16)

with strategy.scope():
  model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activation="relu"),
                            keras.layers.Dense(1)])
  model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")


class KillOnce(keras.callbacks.Callback):
  """SIGKILLs worker 1 once, mid-epoch: no callback gets to save anything more."""

  def on_epoch_begin(self, epoch, logs=None):
    self.epoch = epoch

  def on_train_batch_end(self, batch, logs=None):
    marker = os.path.join(directory, "killed")
    task = os.environ["TF_CONFIG"].count('"index": 1')
    if kill_at == (self.epoch, batch) and task and not os.path.exists(marker):
      open(marker, "w").close()
      print(f"KILLING worker 1 at epoch {self.epoch}, batch {batch}", flush=True)
      os.kill(os.getpid(), signal.SIGKILL)


callbacks = [
    keras.callbacks.BackupAndRestore(os.path.join(directory, "backup"), save_freq=save_freq),
    keras.callbacks.ModelCheckpoint(os.path.join(directory, "model.keras")),
    keras.callbacks.TensorBoard(os.path.join(directory, "logs")),
    KillOnce(),
]
history = model.fit(data, epochs=2, verbose=0, callbacks=callbacks)
weights = np.concatenate([w.ravel() for w in model.get_weights()])
print(f"EPOCHS: {len(history.history['loss'])}", flush=True)
print(f"WEIGHTS: {weights.sum():.6f} {np.round(weights[:4], 6).tolist()}", flush=True)
