"""Fits a tiny model with the chosen Keras under the chosen strategy; prints the outcome.

Usage: python keras_fit.py {keras3,tf_keras} {multi_worker_mirrored,parameter_server} [raw|untested]

Run once per task of a cluster (TF_CONFIG) for multi_worker_mirrored, or alone
for parameter_server (an in-process chief + 2 workers + 1 ps). With `raw`, the
strategy is plain TensorFlow's, to show what happens without tfdist. With
`untested`, tfdist acts as for a Keras 3 outside its tested versions.
Exit codes: 0 trained, 3 refused by tfdist, 4 failed inside TF/Keras.
"""

import sys

import tfdist  # First, as users are told to.
from tfdist import _keras_support as keras_support

flavour, strategy_name = sys.argv[1], sys.argv[2]
raw = sys.argv[3:] == ["raw"]
if sys.argv[3:] == ["untested"]:
  import dataclasses
  from tfdist.internals import keras as keras_internals
  for name, gate in keras_internals.GATES.items():  # As if run with Keras 3.0 and 3.1 only.
    keras_internals.GATES[name] = dataclasses.replace(gate, tested=((3, 0), (3, 1)))

import numpy as np
import tensorflow as tf

if not raw:
  options = {"in_process": True, "network": "host"} if strategy_name == "parameter_server" else {}
  strategy = tfdist.make_strategy(strategy_name, **options)
elif strategy_name == "multi_worker_mirrored":
  strategy = tf.distribute.MultiWorkerMirroredStrategy()
else:
  from tfdist.strategies import _servers as servers
  spec = tfdist.ClusterSpec.local(workers=2, ps=1)
  keep_alive = servers.start_servers(spec)
  strategy = tf.distribute.ParameterServerStrategy(
      tf.distribute.cluster_resolver.SimpleClusterResolver(spec.to_tf(), rpc_layer="grpc"))

if flavour == "keras3":
  import keras
else:
  from tfdist import keras

x = np.random.default_rng(0).random((64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)


def build(reduction_method=None):
  with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    # Keras 3 under 2 workers also runs 2 steps per execution as 1 (tfdist warns).
    model.compile(optimizer="sgd", loss="mse",
                  steps_per_execution=2 if flavour == "keras3" else 1)
  if reduction_method == "tfdist":
    print(f"REDUCTION: {keras_support.set_distribute_reduction_method(model, strategy)}")
  return model


model = build("tfdist" if flavour == "tf_keras" and not raw else None)

if strategy_name == "parameter_server" and flavour == "tf_keras":
  data = keras.utils.experimental.DatasetCreator(
      lambda ctx: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16))
else:
  data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)
initial_weights = model.get_weights()
try:
  history = model.fit(data, epochs=2, steps_per_epoch=4, verbose=0)
except TypeError as e:
  if "with tf_keras, which trains under" not in str(e):
    raise
  print(f"REFUSED: {e}", flush=True)
  sys.exit(3)
except Exception as e:  # What users hit without tfdist.
  print(f"FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
  sys.exit(4)
print(f"TRAINED: losses={history.history['loss']}", flush=True)
if strategy_name == "multi_worker_mirrored":
  evaluation = model.evaluate(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), verbose=0)
  predictions = model.predict(tf.data.Dataset.from_tensor_slices(x).batch(16), verbose=0)
  print(f"EVALUATED: loss={evaluation:.6f} predictions={predictions.shape}", flush=True)
if flavour == "keras3" and strategy_name == "multi_worker_mirrored":
  # The same training in tf_keras, from the same weights, under the same strategy.
  import tf_keras
  with strategy.scope():
    reference = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(1)])
    reference.compile(optimizer="sgd", loss="mse")
  reference.set_weights(initial_weights)
  reference.fit(data, epochs=2, steps_per_epoch=4, verbose=0)
  difference = max(float(np.abs(a - b).max())
                   for a, b in zip(model.get_weights(), reference.get_weights()))
  print(f"WEIGHTS: {np.concatenate([w.ravel() for w in model.get_weights()]).tolist()}")
  print(f"TF_KERAS_DIFFERENCE: {difference:.3g}", flush=True)
if flavour == "tf_keras" and strategy_name == "multi_worker_mirrored":
  # The same training with Keras's default output reduction ("sum", one more
  # all-reduce per step) reports the same losses.
  default = build()
  default.set_weights(initial_weights)
  default_history = default.fit(data, epochs=2, steps_per_epoch=4, verbose=0)
  print(f"DEFAULT_REDUCTION_TRAINED: losses={default_history.history['loss']}", flush=True)
  # Nothing above needed Keras 3, so nothing imported it (a second of CPU, Matplotlib too).
  print(f"KERAS3_IMPORTED: {'keras.src' in sys.modules}", flush=True)
