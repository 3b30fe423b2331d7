"""A 2-worker `tfdist.training.loop` job on shuffled data, killed once mid-epoch; prints RESULT.

Usage (once per task, TF_CONFIG, under `tfdist launch`):
  python loop_resume.py {keras3,tf_keras} DIR {sigkill,sigterm}

600 examples (12,832 with `sigterm`), shuffled with a seed and reshuffled
every epoch, global batch 64 (the last batch partial), 3 epochs, a checkpoint
every 2 steps in DIR. With `sigkill`, worker 1 SIGKILLs itself in its first run
once the loop is 3 steps into the second epoch, between two checkpoints (under
`--max_restarts=1`); with `sigterm` it sends SIGTERM to `tfdist launch` there
instead, as a scheduler stopping the job would (more data, so that the job is
still training when the launcher's SIGTERM reaches it). The resumed run's weights are compared with
the same training, never interrupted, on one device.
"""

import json
import os
import signal
import sys
import threading
import time

import numpy as np

import tfdist
from tfdist.training import loop as loop_lib

flavour, checkpoint_dir, fault = sys.argv[1:4]
strategy = tfdist.make_strategy("multi_worker_mirrored")

import tensorflow as tf

if flavour == "keras3":
  import keras
else:
  keras = tfdist.keras

EPOCHS, EXAMPLES = 3, 600 if fault == "sigkill" else 12832
STEPS_PER_EPOCH = -(-EXAMPLES // 64)
KILL_AFTER = STEPS_PER_EPOCH + 3
rng = np.random.default_rng(0)
x = rng.random((EXAMPLES, 4)).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")).astype("float32")


def data():
  return (tf.data.Dataset.from_tensor_slices((x, y))
          .shuffle(EXAMPLES, seed=7, reshuffle_each_iteration=True).batch(64))


def model_and_loop(strategy, **kwargs):
  keras.utils.set_random_seed(0)
  with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.05)
  return model, loop_lib.Loop(strategy, model, loss=keras.losses.MeanSquaredError(),
                              optimizer=optimizer, **kwargs)


# A checkpoint every 2 steps puts the SIGKILL between two; SIGTERM makes its own.
model, loop = model_and_loop(strategy, checkpoint_dir=checkpoint_dir,
                             checkpoint_every=2 if fault == "sigkill" else 100)
resumed_at = int(loop.step.numpy())
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
marker = os.path.join(checkpoint_dir, "killed")
if task == 1 and not os.path.exists(marker):

  def kill_mid_epoch():
    while int(loop.step.numpy()) <= KILL_AFTER:
      time.sleep(0.005)
    open(marker, "w").close()
    os.kill(os.getpid() if fault == "sigkill" else launcher(), signal.SIGKILL
            if fault == "sigkill" else signal.SIGTERM)

  def launcher():
    pid = os.getppid()
    while pid > 1:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        words = f.read().split(b"\0")
      if b"tfdist" in words and b"launch" in words:
        return pid
      with open(f"/proc/{pid}/stat") as f:
        pid = int(f.read().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("not started by tfdist launch")

  threading.Thread(target=kill_mid_epoch, daemon=True).start()

history = loop.fit(data(), epochs=EPOCHS, verbose=False)
single, single_loop = model_and_loop(tf.distribute.get_strategy())
single_loop.fit(data(), epochs=EPOCHS, verbose=False)
weights = np.concatenate([w.ravel() for w in model.get_weights()])
reference = np.concatenate([w.ravel() for w in single.get_weights()])
print("RESULT " + json.dumps({
    "steps_per_epoch": STEPS_PER_EPOCH, "resumed_at": resumed_at,
    "step": int(loop.step.numpy()),
    "examples": history.get("examples", []), "weights": weights.tolist(),
    "relative_difference": float(np.abs(weights - reference).max()
                                 / np.abs(reference).max())}), flush=True)
