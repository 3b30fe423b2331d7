"""A trainer that reads through the launcher's tf.data service.

Prints, per epoch, which elements of range(N) this trainer read (RESULT
lines: how many, and which as a bitmap, for exactly-once checks across
trainers), then trains a small model
with `fit` under MultiWorkerMirrored on a dataset from the service.

Usage: python data_service_train.py N [PAUSE_SECONDS]
  PAUSE_SECONDS: in epoch 1, after 100 elements, print PAUSED and wait, so
  that a test can kill a data worker mid-epoch.
"""

import json
import sys
import time

import tfdist

strategy = tfdist.make_strategy("multi_worker_mirrored")

import numpy as np
import tensorflow as tf
from tfdist import keras
from tfdist.data import service

n = int(sys.argv[1])
pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0
task = {"index": strategy.cluster_resolver.task_id}  # From TF_CONFIG, or SLURM's variables.
elements = service.distribute(tf.data.Dataset.range(n))


@tf.function
def barrier():  # One all-reduce: returns once both trainers reach it.
  return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("SUM", 1.0))


for epoch in range(2):
  seen = []
  # Both trainers start the epoch together and read at about the same pace, so
  # first come, first served gives each a share (else one that starts late
  # can find the epoch already read).
  barrier()
  for x in elements:
    seen.append(int(x))
    time.sleep(0.001)
    if pause and epoch == 1 and len(seen) == 100:
      print("PAUSED", flush=True)
      time.sleep(pause)
  # A bitmap, not the list: srun splits long lines.
  print("RESULT", json.dumps({"epoch": epoch, "task": task["index"], "count": len(seen),
                              "bits": hex(sum(1 << x for x in set(seen)))}), flush=True)

rng = np.random.default_rng(0)
x = rng.random((512, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
# Repeated, with steps_per_epoch: a shared job splits each epoch first come,
# first served, so its steps vary, and Keras ends training at an epoch shorter
# than the first ("Your input ran out of data").
train = service.distribute(tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat(),
                           job_name="train")
keras.utils.set_random_seed(0)  # The service's order varies; the start need not.
with strategy.scope():
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
  model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
history = model.fit(train, epochs=3, steps_per_epoch=8, verbose=0)
print("FIT", json.dumps({"loss": history.history["loss"],
                         "kernel": model.get_weights()[0].ravel().tolist()}), flush=True)
