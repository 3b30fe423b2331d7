"""Local SGD and DiLoCo under 2-worker MultiWorkerMirrored; prints one JSON line starting with RESULT.

Usage: python local_sgd_train.py DIR   (once per task, TF_CONFIG set by `tfdist launch`;
DIR a folder both workers share, for backups)

For tf_keras and Keras 3 `fit` on 100 examples in global batches of 32 (the
last one has 4), plain SGD: local SGD with sync_every=1 for an epoch against
one device on the same batches (the largest weight difference); DiLoCo every
3 steps: a digest of this worker's weights one step past a sync, and right
after the next; for tf_keras, local SGD every 3 steps with Adam and
tfdist's backup, 2 epochs of 4 steps: this worker's weights and Adam moments
(one step past a sync) straight, and after a crash at the start of epoch 2
and a resume from epoch 1's backup (written between syncs).
"""

import hashlib
import json
import os
import sys

import numpy as np

import tfdist

strategy = tfdist.make_strategy("multi_worker_mirrored")  # Before any other TF op.

import tensorflow as tf  # pylint: disable=g-import-not-at-top
import keras  # pylint: disable=g-import-not-at-top

rng = np.random.default_rng(0)
x = rng.random((100, 4)).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)


def compiled(library, scope):
  library.utils.set_random_seed(0)
  with scope.scope():
    model = library.Sequential([library.Input((4,)), library.layers.Dense(3, activation="tanh"),
                                library.layers.Dense(1)])
    model.compile(optimizer=library.optimizers.SGD(0.1), loss="mse")
  return model


def local_weights(model, variables=None):
  """This worker's own copy (get_weights would too, but say it plainly)."""
  return [strategy.experimental_local_results(v if isinstance(v, tf.Variable) else v.value)[0]
          .numpy() for v in variables or model.trainable_variables]


def difference(a, b):
  return max(float(np.abs(p - q).max()) for p, q in zip(a, b))


def digest(weights):
  return hashlib.sha256(b"".join(np.ascontiguousarray(w).tobytes() for w in weights)).hexdigest()


def adam_fit(library, directory, crash=False):
  """This worker's weights and optimizer slots after 2 epochs; None if it crashed."""
  library.utils.set_random_seed(0)
  with strategy.scope():
    model = library.Sequential([library.Input((4,)), library.layers.Dense(3, activation="tanh"),
                                library.layers.Dense(1)])
    model.compile(optimizer=library.optimizers.Adam(0.01), loss="mse")
  model = tfdist.training.local_sgd(model, tfdist.training.LocalSGDOptions(3))

  class Crash(library.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
      if epoch == 1:
        raise RuntimeError("interrupted")

  callbacks = [tfdist.training.checkpoints.backup_and_restore(directory, model=model)]
  try:
    model.fit(data, epochs=2, verbose=0, callbacks=callbacks + [Crash()] if crash else callbacks)
  except RuntimeError:
    return None
  variables = model.trainable_variables + [v for v in model.optimizer.variables if len(v.shape)]
  return [float(x) for w in local_weights(model, variables) for x in w.ravel()]


result = {}
for name, library in (("tf_keras", tfdist.keras), ("keras3", keras)):
  reference = compiled(library, tf.distribute.get_strategy())
  reference.fit(data, epochs=1, verbose=0)
  synchronous = tfdist.training.local_sgd(compiled(library, strategy),
                                          tfdist.training.LocalSGDOptions(1))
  synchronous.fit(data, epochs=1, verbose=0)
  diloco = tfdist.training.local_sgd(compiled(library, strategy), tfdist.training.LocalSGDOptions(
      3, outer_optimizer="nesterov"))
  diloco.fit(data, epochs=1, verbose=0)  # 4 steps: one past the sync at 3.
  between = digest(local_weights(diloco))
  diloco.fit(data.take(2), epochs=1, verbose=0)  # Steps 5 and 6: a sync.
  result[name] = {
      "synchronous_difference": difference(local_weights(synchronous), reference.get_weights()),
      "between_syncs": between, "after_sync": digest(local_weights(diloco))}
# Each task's own replica copies beside the backup: the same code for both Kerases (their
# backups' hooks are tested in process), tf_keras here.
result["tf_keras"]["straight"] = adam_fit(tfdist.keras, os.path.join(sys.argv[1], "straight"))
adam_fit(tfdist.keras, os.path.join(sys.argv[1], "resumed"), crash=True)
result["tf_keras"]["resumed"] = adam_fit(tfdist.keras, os.path.join(sys.argv[1], "resumed"))
print("RESULT " + json.dumps(result), flush=True)
