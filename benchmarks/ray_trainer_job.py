"""The job both sides of benchmarks/ray_trainer.py run: a 2-worker multi-worker mirrored fit.

Run per task under `tfdist launch --ray` (it prints TIMES), or as a function,
`train()`, inside Ray Train's `TensorflowTrainer`. It reports the wall-clock
time its first step ended and the median time of the steps after the first
ten.
"""

import json
import statistics
import time

STEPS = 60


def train() -> dict:
  import numpy as np
  import tensorflow as tf
  strategy = tf.distribute.MultiWorkerMirroredStrategy()
  import tf_keras as keras  # Keras 3 fails in TensorflowTrainer (ray-project/ray#47464).
  rng = np.random.default_rng(0)
  x = rng.random((STEPS * 64, 64)).astype("float32")
  y = (x.sum(axis=1, keepdims=True) > 32).astype("float32")
  with strategy.scope():
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
  ends = []

  class Clock(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
      ends.append(time.time())

  model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(64), epochs=1, verbose=0,
            callbacks=[Clock()])
  steps = [b - a for a, b in zip(ends[10:], ends[11:])]
  return {"first_step_end": ends[0], "step_seconds": statistics.median(steps)}


if __name__ == "__main__":
  print("TIMES " + json.dumps(train()), flush=True)
