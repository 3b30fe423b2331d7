"""Exporting a trained model for serving: a SavedModel, once, from any strategy.

`export(model, export_dir)` writes `export_dir/<version>/`, a SavedModel with a
`serving_default` signature (TF Serving's layout: it serves the highest numbered
version), that loads with `tf.saved_model.load` in a process with no strategy
and no tfdist, and whose outputs equal the model's. It is Keras's own export
(`Model.export`) with what distributed training adds:

- Written once. Under MultiWorkerMirroredStrategy every worker must take part
  (reading sync-on-read variables, e.g. batch-norm statistics, all-reduces),
  so every worker calls `export`; the chief writes the version, the others a
  temporary copy that is removed at once (TF's rule for multi-worker files).
- Never half-written. The version appears by a rename, after its last file is
  written, so a server polling `export_dir` never loads a partial one.
- Sharded variables. A model (either Keras) whose variables are split over parameter
  servers (`num_ps_shards > 1`) cannot be exported as it is (the signature
  captures a resource the SavedModel does not track), so it is rebuilt outside
  the strategy (`clone_model`, or your `model_fn` for a subclassed model), given
  the sharded values through a checkpoint (TF restores a `ShardedVariable`'s
  checkpoint into whole variables), and the copy is exported.

Example:

    >>> path = tfdist.export(model, "/models/digits")   # "/models/digits/1" on the chief
    >>> served = tf.saved_model.load(path).signatures["serving_default"]
"""

import contextlib
import io
import os
import re
import tempfile
from typing import Callable, Optional

import tensorflow as tf

from tfdist import _folders as folders
from tfdist.training import checkpoints
from tfdist.internals import keras as keras_internals
from tfdist.internals import tensorflow as tf_internals
from tfdist import _keras_support as keras_support

_PARTIAL = ".partial-"


def next_version(export_dir: str) -> int:
  """One more than the highest numbered version in `export_dir` (1 when there is none)."""
  if not tf.io.gfile.isdir(export_dir):
    return 1
  versions = [int(name.rstrip("/")) for name in tf.io.gfile.listdir(export_dir)
              if re.fullmatch(r"\d+/?", name)]
  return max(versions, default=0) + 1


def is_sharded(model) -> bool:
  """Whether any of `model`'s layers holds a variable split over parameter servers."""
  # Every layer, both Kerases: tf_keras's `weights` lists the shards, not the whole.
  for layer in keras_internals.flatten_layers(model, include_self=True):
    for value in vars(layer).values():
      if tf_internals.is_sharded(value) or tf_internals.is_sharded(getattr(value, "value", None)):
        return True
  return False


def _plain_copy(model, model_fn: Optional[Callable]):
  """`model` rebuilt outside any strategy, holding its values (read from the ps tasks)."""
  if tf.distribute.has_strategy():
    raise ValueError("Export a model with sharded variables outside `strategy.scope()`: its "
                     "plain copy must be built with no strategy. Received: a call inside the "
                     f"scope of {type(tf.distribute.get_strategy()).__name__}")
  keras3 = keras_support.is_keras3_model(model)
  if keras3:
    keras_internals.enable_sharded_checkpoints()  # Keras 3 cannot save a sharded variable itself.
    import keras as keras_module  # Not at the top: importing tfdist must not load Keras.
  else:
    import tf_keras as keras_module
  if model_fn is not None:
    copy = model_fn()
  else:
    try:
      copy = keras_module.models.clone_model(model)
    except ValueError as e:  # A subclassed model cannot be cloned.
      raise ValueError(
          "This model's variables are sharded over parameter servers, so it is exported from "
          "a plain copy, and Keras cannot clone it: pass `model_fn` (building the same "
          f"model) to tfdist.export. Received: a {type(model).__name__}: {e}") from e
  with tempfile.TemporaryDirectory(prefix="tfdist-export-") as scratch:
    path = tf.train.Checkpoint(model=model).write(os.path.join(scratch, "ckpt"))
    tf.train.Checkpoint(model=copy).read(path).assert_existing_objects_matched()
  return copy


def export(model, export_dir: str, *, version: Optional[int] = None,
           model_fn: Optional[Callable] = None,
           strategy: Optional[tf.distribute.Strategy] = None,
           verbose: bool = False) -> Optional[str]:
  """Writes `model` as a SavedModel for serving to `export_dir/<version>`, once.

  Call it on every worker (see the module doc).

  Args:
    model: a built tf_keras or Keras 3 model, trained under any strategy.
    export_dir: the model's folder; each export is a numbered version in it.
    version: the version number; default: one more than the highest there.
    model_fn: builds the same model with no strategy; needed only for a
      subclassed model with variables sharded over parameter servers.
    strategy: the model's strategy (default: the one it was built under).
    verbose: print Keras's listing of the endpoints and their captured variables.

  Returns:
    The version's path on the chief, None on the other workers.

  Raises:
    ValueError: `version` exists already or is not a positive integer; a
      sharded model that cannot be copied (see `_plain_copy`).
  """
  if version is None:
    version = next_version(export_dir)
  elif isinstance(version, bool) or not isinstance(version, int) or version < 1:
    raise ValueError(f"`version` must be an integer >= 1 (TF Serving's numbered versions). "
                     f"Received: version={version!r}")
  final = os.path.join(export_dir, str(version))
  strategy = strategy or getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()
  chief = checkpoints.is_chief(strategy)
  if chief and tf.io.gfile.exists(final):
    raise ValueError(f"Version {version} exists already in {export_dir}; a served version is "
                     "never overwritten: give a new `version`, or None for the next one. "
                     f"Received: version={version!r}")
  if is_sharded(model):
    model = _plain_copy(model, model_fn)
  if chief:
    folders.makedirs(export_dir)  # Its user's only, where it makes it.
    write_dir = os.path.join(export_dir, f"{_PARTIAL}{version}")
  else:  # Outside export_dir: nothing there but the chief's versions.
    write_dir = tempfile.mkdtemp(prefix="tfdist-export-worker-")
  try:
    # tf_keras's export has no `verbose`: it prints a line per captured variable.
    with contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO()):
      if keras_support.is_keras3_model(model):
        model.export(write_dir, format="tf_saved_model", verbose=verbose)
      else:
        model.export(write_dir)
    if chief:
      tf.io.gfile.rename(write_dir, final)
  finally:
    if tf.io.gfile.exists(write_dir):
      tf.io.gfile.rmtree(write_dir)
  return final if chief else None
