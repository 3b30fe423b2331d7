"""The chaos soak's job (benchmarks/chaos.py): a multi-worker loop that counts what it trains on.

    tfdist launch --workers 2 --max_restarts K -- python benchmarks/chaos_job.py DIR

Trains a small regression with `tfdist.training.loop` under
MultiWorkerMirroredStrategy on a pipeline shuffled with a seed and reshuffled
every epoch, with a checkpoint in DIR every `--checkpoint_every` steps. Each
step adds 1 to a counter per example it trained on; the counters are part of
the checkpoint, so after any number of restarts they count what the final
model learned from. Worker 0 prints `RESUMED <step>` when it starts, then
`STEP <n>` as the step advances, and at the end one `RESULT {...}` line: the
counts of examples seen more and fewer times than the epochs, and how far the
weights are from the same training, never interrupted, on one device.
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
_BATCH = 64


def main(argv):
  checkpoint_dir = argv[1]
  logging.set_verbosity(logging.WARNING)  # TF's own INFO lines would bury the progress.
  import numpy as np
  import tfdist
  strategy = tfdist.make_strategy("multi_worker_mirrored")
  import tensorflow as tf
  from tfdist import keras
  from tfdist.training import loop as loop_lib

  n = _EXAMPLES.value
  rng = np.random.default_rng(0)
  x = rng.random((n, 4)).astype("float32")
  y = (x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")).astype("float32")
  ids = np.arange(n, dtype="int64")

  def data():
    return (tf.data.Dataset.from_tensor_slices((ids, x, y))
            .shuffle(n, seed=7, reshuffle_each_iteration=True).batch(_BATCH))

  def build(strategy, counted):
    keras.utils.set_random_seed(0)
    with strategy.scope():
      model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
      optimizer = keras.optimizers.SGD(0.05)
      seen = tf.Variable(tf.zeros([n]), trainable=False, name="seen",
                         synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.SUM)

    def step(batch):
      batch_ids, features, labels = batch
      with tf.GradientTape() as tape:
        per_example = tf.reduce_mean(tf.square(labels - model(features, training=True)), axis=1)
        loss = loop_lib.average_loss(per_example)
      variables = model.trainable_variables
      optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
      if counted:
        # Sync-on-read variables take no scatter: a dense count of this batch's ids.
        seen.assign_add(tf.math.bincount(tf.cast(batch_ids, tf.int32), minlength=n,
                                         maxlength=n, dtype=tf.float32))
      return {"loss": tf.reduce_sum(per_example)}

    return model, seen, step, optimizer

  model, seen, step, optimizer = build(strategy, counted=True)
  loop = loop_lib.Loop(strategy, model, optimizer=optimizer, step_fn=step,
                       checkpoint_dir=checkpoint_dir, checkpoint_every=_CHECKPOINT_EVERY.value,
                       checkpointed={"seen": seen})
  chief = strategy.cluster_resolver.task_id == 0
  say = print if chief else (lambda *a, **k: None)
  say(f"RESUMED {int(loop.step.numpy())}", flush=True)
  done = threading.Event()

  def progress():
    last = -1
    while not done.is_set():
      now = int(loop.step.numpy())
      if now != last:
        say(f"STEP {now}", flush=True)
        last = now
      time.sleep(0.05)

  threading.Thread(target=progress, daemon=True).start()
  loop.fit(data(), epochs=_EPOCHS.value, verbose=False)
  done.set()
  counts = seen.read_value().numpy()
  epochs = _EPOCHS.value
  single, _, single_step, single_optimizer = build(tf.distribute.get_strategy(), counted=False)
  loop_lib.Loop(tf.distribute.get_strategy(), single, optimizer=single_optimizer,
                step_fn=single_step).fit(data(), epochs=epochs, verbose=False)
  weights = np.concatenate([w.ravel() for w in model.get_weights()])
  reference = np.concatenate([w.ravel() for w in single.get_weights()])
  say("RESULT " + json.dumps({
      "step": int(loop.step.numpy()),
      "examples_seen_more_often": int(np.sum(np.maximum(0, np.round(counts) - epochs))),
      "examples_seen_fewer_times": int(np.sum(np.maximum(0, epochs - np.round(counts)))),
      "relative_difference": float(np.abs(weights - reference).max()
                                   / np.abs(reference).max())}), flush=True)


if __name__ == "__main__":
  app.run(main)
