"""A Keras fit compiled with XLA (jit_compile=True) under a multi-worker strategy.

Usage: python xla_fit.py multi_worker_mirrored {tf_keras,keras3}  (once per task, TF_CONFIG)
       python xla_fit.py parameter_server tf_keras                 (in-process cluster)
Prints "REFUSED: <message>" and whether the weights moved, or "TRAINED".
"""
import sys

import tfdist

name, flavour = sys.argv[1], sys.argv[2]
if name == "parameter_server":
  strategy = tfdist.make_strategy(name, in_process=True, network="host",
                                  cluster=tfdist.ClusterSpec.local(workers=2, ps=1, chief=True))
else:
  strategy = tfdist.make_strategy(name)

import numpy as np
import tensorflow as tf

keras = __import__("keras") if flavour == "keras3" else tfdist.keras
x = np.random.default_rng(0).random((64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
with strategy.scope():
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
  model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", jit_compile=True)
before = [np.array(w) for w in model.get_weights()]
try:
  if name == "parameter_server":
    model.fit(keras.utils.experimental.DatasetCreator(
        lambda context: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)),
        epochs=1, steps_per_epoch=4, verbose=0)
  else:
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
  print("TRAINED", flush=True)
except ValueError as e:
  moved = any(not np.array_equal(a, np.array(b)) for a, b in zip(before, model.get_weights()))
  print(f"REFUSED: {e} | weights moved: {moved}", flush=True)
