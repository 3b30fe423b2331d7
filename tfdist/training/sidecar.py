"""Evaluation beside training: a task of its own evaluates the chief's checkpoints.

TensorFlow's pattern for evaluating while a cluster trains (the parameter-server
guide's "sidecar evaluation"): the training side writes a weights checkpoint at
every epoch end (`checkpoint_callback`, chief only, as tf_keras's
`ModelCheckpoint` does it under every strategy), and an `evaluator` task, which
is not part of the cluster, runs tf_keras's `SidecarEvaluator` on them
(`evaluate_checkpoints`): it evaluates every checkpoint, in order, writes each
result to TensorBoard (step: the optimizer's iterations at that checkpoint),
and waits for the next, until it has evaluated the last epoch's.
`SidecarEvaluator` alone evaluates whichever checkpoint is newest when it
looks, skipping those written while it was busy; here each one is handed to
it in turn.

`tfdist train --evaluator --checkpoint_dir DIR` does both; `tfdist launch
--evaluator` starts the task for your own script.
"""

import os
import tempfile
import time
from typing import Optional

import tensorflow as tf

from tfdist import _folders as folders
from tfdist import _keras_support as keras_support

CHECKPOINT_NAME = "ckpt-{epoch}"  # SidecarEvaluator reads the epoch from the suffix.
POLL_SECONDS = 0.5  # How often the evaluator looks for a new checkpoint.


def _refuse_keras3(model) -> None:
  if keras_support.is_keras3_model(model):
    raise ValueError("Sidecar evaluation runs tf_keras's SidecarEvaluator, which Keras 3 has "
                     "no counterpart of: build the model with tf_keras (`from tfdist import "
                     "keras`), or evaluate in the training job. Received: a Keras 3 model")


def checkpoint_callback(checkpoint_dir: str, model=None):
  """A callback writing `checkpoint_dir/ckpt-<epoch>` (weights, TF format) at epoch ends.

  Raises:
    ValueError: `model` is a Keras 3 model.
  """
  if model is not None:
    _refuse_keras3(model)
  tf_keras = keras_support.require_tf_keras("the evaluator's checkpoints")
  return tf_keras.callbacks.ModelCheckpoint(os.path.join(checkpoint_dir, CHECKPOINT_NAME),
                                            save_weights_only=True)


def evaluate_checkpoints(model, data, checkpoint_dir: str, *, last_epoch: int,
                         log_dir: Optional[str] = None, steps: Optional[int] = None) -> None:
  """Evaluates the checkpoints `checkpoint_callback` writes, until `ckpt-<last_epoch>`.

  Args:
    model: the same model, compiled with the metrics to report, under no strategy.
    data: what `model.evaluate` reads (a finite dataset, or arrays as a tuple).
    checkpoint_dir: where the chief writes its checkpoints.
    last_epoch: the training's last epoch: its checkpoint ends the evaluation.
    log_dir: TensorBoard folder for the results (default: `checkpoint_dir/eval`).
    steps: batches per evaluation (None: all of `data`).

  Raises:
    ValueError: `model` is a Keras 3 model, or not compiled.
  """
  _refuse_keras3(model)
  tf_keras = keras_support.require_tf_keras("the evaluator")
  if model.optimizer is None:
    raise ValueError("The evaluator's model must be compiled (with the training's optimizer "
                     "type: its step count is the results' x-axis). Received: an uncompiled "
                     f"{type(model).__name__}")
  if hasattr(model.optimizer, "build"):
    # Slots to restore into: the checkpoint holds the training's optimizer state.
    model.optimizer.build(model.trainable_variables)
  log_dir = log_dir or os.path.join(checkpoint_dir, "eval")
  folders.makedirs(log_dir)
  x, y = data if isinstance(data, tuple) else (data, None)
  if y is not None:  # SidecarEvaluator passes `data` as `x` alone.
    x = tf.data.Dataset.from_tensor_slices((x, y)).batch(256)
  callbacks = [tf_keras.callbacks.TensorBoard(log_dir)]
  evaluated = 0
  with tempfile.TemporaryDirectory(prefix="tfdist-sidecar-") as inbox:
    while evaluated < last_epoch:
      ready = sorted(n for n in _written_epochs(checkpoint_dir) if n > evaluated)
      if not ready:
        time.sleep(POLL_SECONDS)
        continue
      epoch = ready[0]
      # SidecarEvaluator evaluates the newest checkpoint of its folder: a folder
      # whose `checkpoint` state names only this one, by its absolute path (the
      # state's text format; TF's own writer for it is deprecated).
      path = os.path.abspath(os.path.join(checkpoint_dir, f"ckpt-{epoch}"))
      with tf.io.gfile.GFile(os.path.join(inbox, "checkpoint"), "w") as state:
        state.write(f'model_checkpoint_path: "{path}"\nall_model_checkpoint_paths: "{path}"\n')
      tf_keras.utils.SidecarEvaluator(model, x, inbox, steps=steps, max_evaluations=epoch,
                                      callbacks=callbacks).start()
      evaluated = epoch


def _written_epochs(checkpoint_dir: str):
  """Epochs whose checkpoint is complete: TF writes its `.index` file last."""
  for path in tf.io.gfile.glob(os.path.join(checkpoint_dir, "ckpt-*.index")):
    number = os.path.basename(path)[len("ckpt-"):-len(".index")]
    if number.isdigit():
      yield int(number)
