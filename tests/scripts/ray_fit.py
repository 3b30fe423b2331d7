"""Fits a tiny model under the strategy TF_CONFIG calls for; prints RESULT (run per task).

Usage: python ray_fit.py {tf_keras,keras3} {multi_worker_mirrored,parameter_server}
           [sleep=SECONDS] [backup=DIR] [epochs=N] [marker text]

Under parameter servers only the chief gets past make_strategy (workers and ps
serve). With sleep=, the task prints READY and sleeps that long first (for a
test that kills the launcher). With backup=, it backs up into DIR and trains
slowly (0.1 s a step, 4 epochs of 8 steps, or epochs=), printing EPOCH n as
each begins, so that a test can take a node away mid-training.
"""

import json
import os
import sys
import time

import numpy as np

import tfdist

flavour, strategy_name = sys.argv[1:3]
options = dict(a.split("=", 1) for a in sys.argv[3:] if "=" in a)
if "sleep" in options:
  print("READY", flush=True)
  time.sleep(float(options["sleep"]))
strategy = tfdist.make_strategy(strategy_name)

import tensorflow as tf

if flavour == "keras3":
  import keras
else:
  from tfdist import keras

keras.utils.set_random_seed(0)
x = np.random.default_rng(0).random((256, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
with strategy.scope():
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
  model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
if strategy_name == "parameter_server":
  data = keras.utils.experimental.DatasetCreator(
      lambda context: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32))
  history = model.fit(data, epochs=3, steps_per_epoch=8, verbose=0)
elif "backup" in options:
  from tfdist.training import checkpoints

  class Slowly(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
      print(f"EPOCH {epoch + 1}", flush=True)

    def on_train_batch_end(self, batch, logs=None):
      time.sleep(0.1)

  history = model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(32),
                      epochs=int(options.get("epochs", 4)), verbose=0,
                      callbacks=[checkpoints.backup_and_restore(options["backup"], model=model),
                                 Slowly()])
else:
  history = model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(32), epochs=3, verbose=0)
task = json.loads(os.environ["TF_CONFIG"])["task"]
print("RESULT " + json.dumps({
    "task": f"{task['type']}:{task['index']}", "losses": history.history["loss"],
    "workers": len(json.loads(os.environ["TF_CONFIG"])["cluster"].get("worker", [])),
    "weights": [float(w) for w in np.concatenate([v.ravel() for v in model.get_weights()])]}),
    flush=True)
