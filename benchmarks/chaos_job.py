"""The chaos soak's job (benchmarks/chaos.py): a multi-worker loop that counts what it trains on.

    tfdist launch --workers 2 --max_restarts K -- python benchmarks/chaos_job.py DIR
    tfdist launch --workers 2 --data_workers 2 -- python benchmarks/chaos_job.py DIR \
        --mode=data_service
    tfdist launch --chief --workers 2 --ps 1 --max_restarts K -- \
        python benchmarks/chaos_job.py DIR --mode=parameter_server

Trains a small regression with `tfdist.training.loop` on a pipeline shuffled
with a seed and reshuffled every epoch, with a checkpoint in DIR every
`--checkpoint_every` steps. Each step adds 1 to a counter per example it
trained on, and 1 to a count of steps; the counters are part of the
checkpoint, so after any number of restarts they count what the final model
learned from. The first task prints `RESUMED <step>` when it starts, then
`STEP <n>` as the step advances, and at the end one `RESULT {...}` line: the
steps run and applied, the counts of examples seen more and fewer times than
the epochs, and (`mwms`) how far the weights are from the same training,
never interrupted, on one device.

Modes: `mwms`, MultiWorkerMirroredStrategy reading its own pipeline (exactly
once); `data_service`, the same reading through the tf.data service's shared
job, `distributed_epoch` (a lost data worker's splits are not read again: at
most once); `parameter_server`, ParameterServerStrategy, each worker reading
its own shard of the data (a step whose worker is lost runs again: at least
once).
"""

import json
import threading
import time

from absl import app
from absl import flags
from absl import logging

# 1,000 steps an epoch: enough that a fault lands mid-training, however late.
_EXAMPLES = flags.DEFINE_integer("examples", 64000, "Training examples.", lower_bound=64)
_EPOCHS = flags.DEFINE_integer("epochs", 3, "Epochs.", lower_bound=1)
_CHECKPOINT_EVERY = flags.DEFINE_integer("checkpoint_every", 50, "Steps between checkpoints.",
                                         lower_bound=1)
_MODE = flags.DEFINE_enum("mode", "mwms", ["mwms", "data_service", "parameter_server"],
                          "The strategy and where the input comes from.")
_BATCH = 64


def main(argv):
  checkpoint_dir = argv[1]
  logging.set_verbosity(logging.WARNING)  # TF's own INFO lines would bury the progress.
  import numpy as np
  import tfdist
  mode = _MODE.value
  strategy = tfdist.make_strategy("parameter_server" if mode == "parameter_server"
                                  else "multi_worker_mirrored")
  import tensorflow as tf
  from tfdist import keras
  from tfdist.data import service
  from tfdist.training import loop as loop_lib

  n = _EXAMPLES.value
  steps_per_epoch = n // _BATCH
  rng = np.random.default_rng(0)
  x = rng.random((n, 4)).astype("float32")
  y = (x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")).astype("float32")
  ids = np.arange(n, dtype="int64")

  def examples():
    return tf.data.Dataset.from_tensor_slices((ids, x, y))

  def data():
    return examples().shuffle(n, seed=7, reshuffle_each_iteration=True).batch(_BATCH)

  def shards(context):  # parameter_server: each worker its own shard, round and round.
    shard = examples().shard(context.num_input_pipelines, context.input_pipeline_id)
    return (shard.shuffle(n, seed=7, reshuffle_each_iteration=True).repeat()
            .batch(context.get_per_replica_batch_size(_BATCH)))

  def build(strategy, counted):
    keras.utils.set_random_seed(0)
    with strategy.scope():
      model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
      optimizer = keras.optimizers.SGD(0.05)
      if mode == "parameter_server":  # On the ps task, added to by every worker.
        seen = tf.Variable(tf.zeros([n]), trainable=False, name="seen")
        applied = tf.Variable(0, dtype=tf.int64, trainable=False, name="applied")
      else:
        seen = tf.Variable(tf.zeros([n]), trainable=False, name="seen",
                           synchronization=tf.VariableSynchronization.ON_READ,
                           aggregation=tf.VariableAggregation.SUM)
        applied = None

    def step(batch):
      batch_ids, features, labels = batch
      with tf.GradientTape() as tape:
        per_example = tf.reduce_mean(tf.square(labels - model(features, training=True)), axis=1)
        loss = loop_lib.average_loss(per_example)
      variables = model.trainable_variables
      optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
      if counted and applied is not None:
        seen.scatter_add(tf.IndexedSlices(tf.ones_like(batch_ids, tf.float32), batch_ids))
        applied.assign_add(1)
      elif counted:
        # Sync-on-read variables take no scatter: a dense count of this batch's ids.
        seen.assign_add(tf.math.bincount(tf.cast(batch_ids, tf.int32), minlength=n,
                                         maxlength=n, dtype=tf.float32))
      return {"loss": tf.reduce_sum(per_example)}

    return model, seen, applied, step, optimizer

  model, seen, applied, step, optimizer = build(strategy, counted=True)
  checkpointed = {"seen": seen} if applied is None else {"seen": seen, "applied": applied}
  loop = loop_lib.Loop(strategy, model, optimizer=optimizer, step_fn=step,
                       checkpoint_dir=checkpoint_dir, checkpoint_every=_CHECKPOINT_EVERY.value,
                       checkpointed=checkpointed)
  chief = mode == "parameter_server" or strategy.cluster_resolver.task_id == 0
  say = print if chief else (lambda *a, **k: None)
  # Under parameter servers the loop's step moves once an epoch; the ps counts each step.
  progress_of = loop.step if applied is None else applied
  say(f"RESUMED {int(progress_of.numpy())}", flush=True)
  done = threading.Event()

  def progress():
    last = -1
    while not done.is_set():
      now = int(progress_of.numpy())
      if now != last:
        say(f"STEP {now}", flush=True)
        last = now
      time.sleep(0.05)

  if chief:  # chaos.py reads the first task's lines only; a read is an op (an RPC under ps).
    threading.Thread(target=progress, daemon=True).start()
  epochs = _EPOCHS.value
  if mode == "parameter_server":
    loop.fit(shards, epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=False)
  elif mode == "data_service":
    # Repeated, with steps_per_epoch: the shared job hands out batches first come,
    # first served, and both trainers must run the same steps.
    loop.fit(service.distribute(data().repeat(), job_name="chaos"), epochs=epochs,
             steps_per_epoch=steps_per_epoch, verbose=False)
  else:
    loop.fit(data(), epochs=epochs, verbose=False)
  done.set()
  counts = np.round(seen.read_value().numpy())
  result = {
      "step": int(loop.step.numpy()),
      "applied": int(loop.step.numpy()) if applied is None else int(applied.numpy()),
      "examples_seen_more_often": int(np.sum(np.maximum(0, counts - epochs))),
      "examples_seen_fewer_times": int(np.sum(np.maximum(0, epochs - counts))),
      "examples_trained": int(counts.sum())}
  if mode == "mwms" and chief:  # Only the chief prints the result.
    single, _, _, single_step, single_optimizer = build(tf.distribute.get_strategy(),
                                                        counted=False)
    loop_lib.Loop(tf.distribute.get_strategy(), single, optimizer=single_optimizer,
                  step_fn=single_step).fit(data(), epochs=epochs, verbose=False)
    weights = np.concatenate([w.ravel() for w in model.get_weights()])
    reference = np.concatenate([w.ravel() for w in single.get_weights()])
    result["relative_difference"] = float(np.abs(weights - reference).max()
                                          / np.abs(reference).max())
  say("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
  app.run(main)
