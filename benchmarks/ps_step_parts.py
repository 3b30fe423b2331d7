"""Where a parameter-server step's time goes: closures of growing work, scheduled by the coordinator.

    tfdist launch --chief --workers 2 --ps 1 -- python benchmarks/ps_step_parts.py

On the chief, `tfdist.make_strategy("parameter_server")`'s coordinator
schedules 300 closures of each kind over the two workers, each adding one part
of `tfdist train`'s default step (the small CNN, batch 64, Adam) to the last:
an empty function (the scheduling and the remote call alone), a read of every
variable from the ps, the forward and backward pass, and the full step with
its update applied on the ps. Then the same full step on the chief's own
device, with no ps. Prints milliseconds per closure (the workers run two at a
time, as under `fit`) as one JSON line starting with RESULT.
"""
import json
import time

import tfdist
strategy = tfdist.make_strategy("parameter_server")  # worker and ps tasks serve here and never return
import numpy as np  # pylint: disable=wrong-import-position
import tensorflow as tf  # pylint: disable=wrong-import-position
from tfdist import keras
from tfdist.training import job

coordinator = strategy.coordinator
rng = np.random.default_rng(0)
x = tf.constant(rng.random((64, 8, 8, 1)), tf.float32)
y = tf.constant(rng.integers(0, 10, 64))


def loss_fn(labels, logits):
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))


with strategy.scope():
  model = job.small_cnn(keras)
  optimizer = keras.optimizers.Adam(1e-3)
local = job.small_cnn(keras)
local_optimizer = keras.optimizers.Adam(1e-3)


def make(model, optimizer, what):
  @tf.function
  def fn():
    if what == "empty":
      return tf.constant(0.0)
    if what == "read":
      return tf.add_n([tf.reduce_sum(v) for v in model.trainable_variables])
    def replica():
      with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
      grads = tape.gradient(loss, model.trainable_variables)
      if what == "step":
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
      else:
        tf.add_n([tf.reduce_sum(g) for g in grads])
      return loss
    return strategy.run(replica) if model is not local else replica()
  return fn

results = {}
N = 300
for what in ("empty", "read", "gradient", "step"):
  fn = make(model, optimizer, what)
  for _ in range(20):
    coordinator.schedule(fn)
  coordinator.join()
  start = time.perf_counter()
  for _ in range(N):
    coordinator.schedule(fn)
  coordinator.join()
  results[f"ps {what}"] = 1000 * (time.perf_counter() - start) / N
local_step = make(local, local_optimizer, "step")
for _ in range(20):
  local_step()
start = time.perf_counter()
for _ in range(N):
  out = local_step()
float(out)
results["one device step"] = 1000 * (time.perf_counter() - start) / N
print("RESULT " + json.dumps(results), flush=True)
