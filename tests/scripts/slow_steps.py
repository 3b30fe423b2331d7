"""Two-worker MultiWorkerMirrored training whose steps take about 0.6 s, with backups.

Usage: python slow_steps.py CHECKPOINT_DIR. Prints the final weights' digest.
"""
import sys
import time

import tfdist

strategy = tfdist.make_strategy("multi_worker_mirrored")

import numpy as np
from tfdist import keras
from tfdist.training import checkpoints
from tfdist.training import job


class SlowSteps(keras.callbacks.Callback):
  def on_train_batch_end(self, batch, logs=None):
    time.sleep(0.6)  # A step this slow: the old 10-batch check came after 6 s.


x = np.random.default_rng(0).random((128, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
with strategy.scope():
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
  model.compile(optimizer="sgd", loss="mse")
model.fit(x, y, batch_size=16, epochs=3, verbose=2, shuffle=False,
          callbacks=[SlowSteps(), checkpoints.backup_and_restore(sys.argv[1])])
print("final weights", job.weights_digest(model.get_weights()), flush=True)
