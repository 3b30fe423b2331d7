"""A Keras 3 user's job where tf_keras is not installed; prints one RESULT line.

Run with `helpers.without_tf_keras()`. Under MirroredStrategy a Keras 3 model fits with
tfdist's backup, is saved once and exported; `tfdist.Loop` trains it; then each part that
only tf_keras runs is used, and what it raised is recorded; `Keras3SplitDense`, from
the same `tfdist.placement`, is used too.
"""

import importlib
import json
import os
import sys
import tempfile

import numpy as np

import tfdist

strategy = tfdist.make_strategy("mirrored")
import keras  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tfdist import training  # pylint: disable=g-import-not-at-top
from tfdist.training import checkpoints  # pylint: disable=g-import-not-at-top

folder = tempfile.mkdtemp()
x = np.random.default_rng(0).random((64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
with strategy.scope():
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
  model.compile(keras.optimizers.SGD(0.05), "mse")
history = model.fit(x, y, batch_size=16, epochs=2, verbose=0,
                    callbacks=[checkpoints.backup_and_restore(folder, model=model)])
result = {"tf_keras_loaded": "tf_keras" in sys.modules,
          "losses": history.history["loss"],
          "saved": checkpoints.save_model(model, os.path.join(folder, "model.keras")),
          "exported": tfdist.export(model, os.path.join(folder, "export"), strategy=strategy)}
loop = tfdist.Loop(strategy, model, loss=keras.losses.MeanSquaredError(),
                   optimizer=model.optimizer)
logs = loop.fit(lambda _: tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat(),
                epochs=1, steps_per_epoch=2, verbose=False)
result["loop_losses"] = logs["loss"]
# Without `model=`, the backup is Keras 3's: every model here is one.
result["backup_class"] = type(checkpoints.backup_and_restore(folder)).__name__
result["fit_step"] = training.fit_step.synchronise_once(model, strategy)
from tfdist import _doctor  # pylint: disable=g-import-not-at-top
result["doctor_xla"] = dict(dict(_doctor.diagnose({}, check_xla=True).sections)[
    "jit_compile=True (XLA) x strategy"])

# tfdist.placement imports: its Keras 3 layer needs no tf_keras.
split = tfdist.placement.Keras3SplitDense(3, ["/cpu:0", "/cpu:0"])
result["keras3_split_dense"] = list(split(x[:2]).shape)

uses = {
    "tfdist.keras": lambda: tfdist.keras,
    "SplitDense": lambda: tfdist.placement.SplitDense(4, ["/cpu:0"]),
    "SplitDense.from_dense": lambda: tfdist.placement.SplitDense.from_dense(
        model.layers[0], ["/cpu:0"]),
    "place_layers": lambda: tfdist.placement.place_layers(model, ["/cpu:0"]),
    "PlacedSequential.from_config": lambda: tfdist.placement.PlacedSequential.from_config({}),
    "sparsification": lambda: training.sparsification,
    # Imported directly, not through tfdist.training's attribute.
    "import sparsification": lambda: importlib.import_module("tfdist.training.sparsification"),
    "compress_gradients": lambda: training.compression.compress_gradients(
        keras.optimizers.SGD(0.1)),
    "BackupAndRestore": lambda: checkpoints.BackupAndRestore(folder),
    "WarmUp": lambda: training.scaling.scale_learning_rate(0.1, 2, warmup_steps=10),
}
result["errors"] = {}
for name, use in uses.items():
  try:
    use()
    result["errors"][name] = None
  except ModuleNotFoundError as e:
    result["errors"][name] = [type(e).__name__, e.name, str(e)]
result["tf_keras_loaded"] = result["tf_keras_loaded"] or "tf_keras" in sys.modules
print("RESULT " + json.dumps(result), flush=True)
