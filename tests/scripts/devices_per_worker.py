"""MultiWorkerMirrored with 2 logical CPUs per worker standing in for 2 GPUs each.

Usage (once per task, with TF_CONFIG): python devices_per_worker.py. Trains a
small regression with tf_keras `fit` on 2 workers x 2 devices (4 replicas,
global batch 64), then the same from the same start on one device. Prints one
RESULT line of JSON: the replicas and their devices, the weights, and their
largest difference from one device's.
"""
import json

import tfdist

tfdist.devices.split_physical_device(2)  # Before the strategy: its replicas.
strategy = tfdist.make_strategy("multi_worker_mirrored", devices_per_worker=2)

import numpy as np
import tensorflow as tf

keras = tfdist.keras
rng = np.random.default_rng(0)
x = rng.random((1024, 8)).astype("float32")
y = (x @ rng.random((8, 1))).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)


def model():
  keras.utils.set_random_seed(0)
  built = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                            keras.layers.Dense(1)])
  built.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
  return built


with strategy.scope():
  replicated = model()
losses = replicated.fit(data, epochs=3, verbose=0).history["loss"]
single = model()  # No strategy: one device, the same global batch.
single.fit(data, epochs=3, verbose=0)
print("RESULT " + json.dumps({
    "replicas": strategy.num_replicas_in_sync,
    "devices": list(strategy.extended.worker_devices), "losses": losses,
    "weights": float(sum(np.abs(w).sum() for w in replicated.get_weights())),
    "single_device_difference": max(float(np.abs(a - b).max()) for a, b in zip(
        replicated.get_weights(), single.get_weights()))}), flush=True)
