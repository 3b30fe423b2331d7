"""Exports models trained under an in-process parameter-server cluster.

Usage: python export_pss.py NUM_PS_SHARDS OUT_DIR. For each Keras, fits a small
classifier (tf_keras with `fit`, Keras 3 with tfdist.training.loop), exports it to
OUT_DIR/<keras>, and saves OUT_DIR/x.npy and OUT_DIR/<keras>.npy (its outputs).
Prints one RESULT line of JSON: the exported paths, or the error, per Keras.
"""
import json
import os
import sys

import tfdist

shards, out = int(sys.argv[1]), sys.argv[2]
spec = tfdist.ClusterSpec.local(workers=2, ps=2, chief=True)
strategy = tfdist.make_strategy("parameter_server", cluster=spec, in_process=True,
                                network="host", num_ps_shards=shards)

import keras as keras3
import numpy as np
import tensorflow as tf
import tf_keras

x = np.random.default_rng(0).random((64, 8, 8, 1)).astype("float32")
y = (x.reshape(64, -1).sum(axis=1) > 32).astype("int64")
np.save(os.path.join(out, "x.npy"), x)


def dataset_fn(context):
  return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)


results = {}
for name, keras in (("tf_keras", tf_keras), ("keras3", keras3)):
  with strategy.scope():
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(2)])
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  try:
    if name == "tf_keras":
      with strategy.scope():
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss)
      model.fit(tf_keras.utils.experimental.DatasetCreator(dataset_fn), epochs=1,
                steps_per_epoch=4, verbose=0)
    else:
      tfdist.training.loop.Loop(strategy, model, loss=loss, optimizer=keras.optimizers.SGD(0.1)).fit(
          dataset_fn, epochs=1, steps_per_epoch=4, verbose=False)
    np.save(os.path.join(out, f"{name}.npy"), np.asarray(model(x)))
    results[name] = {"path": tfdist.export(model, os.path.join(out, name)),
                     "sharded": tfdist.training.saved_model.is_sharded(model)}
  except ValueError as e:
    results[name] = {"error": str(e)}
print("RESULT " + json.dumps(results), flush=True)
