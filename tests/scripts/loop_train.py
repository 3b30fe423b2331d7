"""tfdist.training.loop under multi-worker strategies; prints one JSON line starting with RESULT.

Usage:
  python loop_train.py {keras3,tf_keras} multi_worker_mirrored DIR  (once per task, TF_CONFIG)
  python loop_train.py {keras3,tf_keras} parameter_server [sharded]  (in-process cluster)

multi_worker_mirrored: 1000 examples, global batch 64 (the last batch partial),
2 epochs, checkpoints in DIR; prints the examples counted, the weights, and
how far they are from the same training on one device. parameter_server: trains
a regression and adds 1 to a Keras variable in concurrent steps, and for Keras 3
again with Keras's own non-atomic `assign_add`; with `sharded`, variables are
split over 2 ps tasks, and a new model resumes from the loop's checkpoint.
"""

import json
import os
import shutil
import sys
import tempfile

import numpy as np

import tfdist
from tfdist.training import loop as loop_lib

flavour, strategy_name = sys.argv[1], sys.argv[2]
sharded = sys.argv[3:] == ["sharded"]
if strategy_name == "parameter_server":
  strategy = tfdist.make_strategy(
      "parameter_server", in_process=True, network="host",
      cluster=tfdist.ClusterSpec.local(workers=2, ps=2 if sharded else 1, chief=True),
      num_ps_shards=2 if sharded else None)
else:
  strategy = tfdist.make_strategy(strategy_name)

import tensorflow as tf

if flavour == "keras3":
  import keras
else:
  keras = tfdist.keras

rng = np.random.default_rng(0)
x = rng.random((1000, 4)).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")).astype("float32")
keras.utils.set_random_seed(0)
with strategy.scope():
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
  optimizer = keras.optimizers.SGD(0.2)

if strategy_name == "multi_worker_mirrored":
  initial = model.get_weights()
  data = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
  loop = loop_lib.Loop(strategy, model, loss=keras.losses.MeanSquaredError(),
                       optimizer=optimizer, steps_per_loop=4, checkpoint_dir=sys.argv[3])
  history = loop.fit(data, epochs=2, verbose=False)
  evaluation = loop.evaluate(tf.data.Dataset.from_tensor_slices((x[:999], y[:999])).batch(64))
  # The same training on one device (the default strategy), same global batch.
  single = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
  single.set_weights(initial)
  loop_lib.Loop(tf.distribute.get_strategy(), single, loss=keras.losses.MeanSquaredError(),
                optimizer=keras.optimizers.SGD(0.2)).fit(data, epochs=2, verbose=False)
  print("RESULT " + json.dumps({
      "history": history, "evaluation": evaluation,
      "weights": np.concatenate([w.ravel() for w in model.get_weights()]).tolist(),
      "single_device_difference": max(float(np.abs(a - b).max()) for a, b in zip(
          model.get_weights(), single.get_weights()))}), flush=True)
  sys.exit(0)


def dataset_fn(input_context):
  return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1000, seed=0).repeat().batch(32)


checkpoint_dir = tempfile.mkdtemp(prefix="loop-train-") if sharded else None


def raw_checkpoint_error():
  """What Keras 3 alone says when a sharded model is checkpointed (None: it saves)."""
  with tempfile.TemporaryDirectory() as scratch:
    try:
      tf.train.Checkpoint(model=model).write(os.path.join(scratch, "raw"))
    except AttributeError as e:
      return str(e)
  return None


raw_errors = [raw_checkpoint_error()] if sharded and flavour == "keras3" else []
loop = loop_lib.Loop(strategy, model, loss=keras.losses.MeanSquaredError(),
                     optimizer=optimizer, steps_per_loop=5, checkpoint_dir=checkpoint_dir)
history = loop.fit(dataset_fn, epochs=4, steps_per_epoch=40, verbose=False)
restored = None
if sharded:  # A new model and loop on the same folder resume the sharded variables.
  keras.utils.set_random_seed(1)
  with strategy.scope():
    fresh = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    fresh_optimizer = keras.optimizers.SGD(0.2)
  resumed = loop_lib.Loop(strategy, fresh, loss=keras.losses.MeanSquaredError(),
                          optimizer=fresh_optimizer, steps_per_loop=5,
                          checkpoint_dir=checkpoint_dir)
  restored = {"step": int(resumed.step.numpy()),
              "weights_equal": all(np.array_equal(a, b) for a, b in zip(
                  fresh.get_weights(), model.get_weights())),
              "saved_shapes": dict(tf.train.list_variables(
                  tf.train.latest_checkpoint(checkpoint_dir)))}
  shutil.rmtree(checkpoint_dir)
  if flavour == "keras3":
    from tfdist.internals import keras as keras_internals
    keras_internals.disable_sharded_checkpoints()  # Undone: Keras's own failure again.
    raw_errors.append(raw_checkpoint_error())
  restored["raw_checkpoint_errors"] = raw_errors
# Exact evaluation: 1001 examples in batches of 64 (the last partial), each once.
x_eval = rng.random((1001, 4)).astype("float32")
y_eval = (x_eval @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")).astype("float32")
evaluation = loop.evaluate(
    lambda context: tf.data.Dataset.from_tensor_slices((x_eval, y_eval)).batch(64))
true_loss = float(np.mean((np.asarray(model(x_eval)) - y_eval) ** 2))  # On the coordinator.
try:
  loop.evaluate(lambda context: tf.data.Dataset.from_tensor_slices((x_eval, y_eval)).repeat())
  infinite_error = None
except ValueError as e:
  infinite_error = str(e)
variables = [v.value if flavour == "keras3" else v  # Keras 3: the tf.Variable inside.
             for v in model.trainable_variables]
devices = sorted({s.device for v in variables for s in getattr(v, "variables", [v])})

# Concurrent updates: every step adds 1 to one variable on the ps, many times.
INCREMENTS, STEPS = 50, 40


def count(counter):
  def step(batch):
    for _ in range(INCREMENTS):
      counter.assign_add(1.0)
    return {}
  loop_lib.Loop(strategy, model, optimizer=optimizer, step_fn=step).fit(
      dataset_fn, epochs=1, steps_per_epoch=STEPS, verbose=False)
  return float(counter.numpy())


def new_counter():
  with strategy.scope():
    return keras.Variable(0.0, trainable=False) if flavour == "keras3" else tf.Variable(0.0)


counted = count(new_counter())
raw_counted = None
if flavour == "keras3":  # Keras 3's own assign_add, for comparison: it loses updates.
  from tfdist.internals import keras as keras_internals
  raw_counter = new_counter()

  def raw_step(batch):
    for _ in range(INCREMENTS):
      raw_counter.assign_add(1.0)
    return {}
  raw_loop = loop_lib.Loop(strategy, model, optimizer=optimizer, step_fn=raw_step)
  keras_internals.disable_atomic_assign_add()  # After the Loop, which made it atomic.
  raw_loop.fit(dataset_fn, epochs=1, steps_per_epoch=STEPS, verbose=False)
  raw_counted = float(raw_counter.numpy())
accumulated = None
if not sharded:  # Each worker computes its batches in 4 micro-batches and pushes once each.
  with strategy.scope():
    accumulating = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    accumulating_optimizer = keras.optimizers.SGD(0.2)
  accumulated = {"history": loop_lib.Loop(
      strategy, accumulating, loss=keras.losses.MeanSquaredError(),
      optimizer=accumulating_optimizer, steps_per_loop=5, accumulate_steps=4).fit(
          dataset_fn, epochs=2, steps_per_epoch=10, verbose=False),
                 "iterations": int(accumulating_optimizer.iterations.numpy())}
print("RESULT " + json.dumps({
    "accumulated": accumulated,
    "history": history, "evaluation": evaluation, "true_loss": true_loss,
    "infinite_error": infinite_error,
    "kernel_devices": devices, "optimizer_iterations": int(optimizer.iterations),
    "counter": counted, "raw_counter": raw_counted, "expected": INCREMENTS * STEPS,
    "restored": restored}), flush=True)
# The result is out. An in-process cluster's servers and the coordinator's
# daemon threads live in this interpreter, and its teardown can abort beneath
# them (SIGABRT once in a loaded CI run, after this line printed): leave
# without a teardown, as tfdist's own serving tasks do.
sys.stdout.flush()
os._exit(0)
