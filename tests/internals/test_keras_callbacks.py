"""tfdist.internals.keras_callbacks: Keras 3's own callbacks write once under multi-worker.

The multi-worker behaviour is launched in tests/task/test_task_keras.py; here,
the gate, the undo, and that one process gets Keras's own behaviour.
"""

import os

import keras
import numpy as np
import pytest

from tfdist.internals import keras_callbacks

# Version-sensitive: `make test-versions` runs it on the oldest and newest supported TensorFlow too.
pytestmark = pytest.mark.versions


def test_enabled_in_one_process_it_leaves_keras_behaviour_and_the_undo_restores_keras(tmp_path):
  own = {name: vars(keras.callbacks.BackupAndRestore).get(name)
         for name in ("_save_model", "on_train_begin", "on_epoch_begin")}
  restored = []
  with keras_callbacks.chief_writes(on_restore=lambda *args: restored.append(args)) as enabled:
    assert enabled
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    seen = []

    class Files(keras.callbacks.Callback):
      def on_epoch_end(self, epoch, logs=None):
        seen.append(sorted(os.listdir(tmp_path / "backup")))

    model.fit(np.zeros((4, 2)), np.zeros((4, 1)), epochs=1, verbose=0,
              callbacks=[keras.callbacks.BackupAndRestore(str(tmp_path / "backup")), Files()])
  # Keras's own files, where Keras puts them; no resume hook without multi-worker.
  assert seen == [["latest.weights.h5", "training_metadata.json"]]
  assert restored == []
  assert {name: vars(keras.callbacks.BackupAndRestore).get(name) for name in own} == own
