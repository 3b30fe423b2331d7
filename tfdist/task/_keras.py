"""Which Keras the tasks of a launch train with, for scripts that never import tfdist.

TensorFlow's own tutorials build `tf.distribute.MultiWorkerMirroredStrategy()`
from TF_CONFIG and write `tf.keras`. Since TF 2.16 `tf.keras` is Keras 3 unless
`TF_USE_LEGACY_KERAS=1`, and raw Keras 3 cannot fit under multi-worker
MultiWorkerMirroredStrategy (keras-team/keras#20585) nor under
ParameterServerStrategy (keras-team/keras#18624). So every task `tfdist launch`
starts gets, deliberately:

- `TF_USE_LEGACY_KERAS` for the chosen Keras: "tf_keras" (the default where it
  is installed, under which `tf.keras` code trains with every strategy) or
  "keras3" (the default where TensorFlow came with Keras 3 alone, as TF 2.16 and
  later install it: there `tf.keras` is Keras 3 as TensorFlow makes it);
- tfdist's task site folder (`tfdist/task/site`) first on PYTHONPATH: its `sitecustomize` enables
  `tfdist.internals.keras` the moment Keras 3's TensorFlow trainer is
  imported, so `import keras` code trains under multi-worker
  MultiWorkerMirroredStrategy too, without importing tfdist. It patches nothing
  in a process that never imports Keras 3. Once Keras 3's callbacks are
  imported, their own BackupAndRestore, ModelCheckpoint and TensorBoard
  write once, from the chief, and BackupAndRestore resumes at the batch it
  backed up (`enable_keras3_callbacks_on_import`); and a task that would
  train alone is told so (`tfdist.task._trains_alone`).

The choice: explicit > `TF_USE_LEGACY_KERAS` already in the environment > tf_keras where it
is installed here > Keras 3.
"""

import os
from typing import Dict, Mapping, Optional

from tfdist import _keras_support as keras_support
from tfdist.task import _imports as task_imports

LEGACY_KERAS_ENV = keras_support.LEGACY_KERAS_ENV
KERAS_CHOICES = (keras_support.TF_KERAS, keras_support.KERAS3)
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")

_TRUE, _FALSE = ("1", "true", "True", "TRUE"), ("0", "false", "False", "FALSE", "")


def resolve(keras: Optional[str] = None, environ: Optional[Mapping[str, str]] = None, *,
            here: bool = True) -> str:
  """The Keras the tasks get: explicit `keras`, else TF_USE_LEGACY_KERAS, else tf_keras.

  Where the tasks run with this machine's packages (`here`) and tf_keras is not
  installed, Keras 3. A manifest's image is not this machine: `here=False`.
  """
  environ = os.environ if environ is None else environ
  if keras is not None:
    if keras not in KERAS_CHOICES:
      raise ValueError(f"`keras` must be one of {list(KERAS_CHOICES)}, or None to follow "
                       f"{LEGACY_KERAS_ENV} (default tf_keras where it is installed, else keras3). "
                       f"Received: {keras!r}")
    return keras
  if LEGACY_KERAS_ENV not in environ:
    return keras_support.default_keras() if here else keras_support.TF_KERAS
  value = environ[LEGACY_KERAS_ENV]
  if value in _TRUE:
    return keras_support.TF_KERAS
  if value in _FALSE:
    return keras_support.KERAS3
  raise ValueError(f"`{LEGACY_KERAS_ENV}` must be 1 (tf_keras) or 0 (Keras 3). "
                   f"Received: {LEGACY_KERAS_ENV}={value!r}")


def resolve_here(keras: Optional[str] = None,
                 environ: Optional[Mapping[str, str]] = None, *,
                 given_as: str = "--keras=tf_keras") -> str:
  """`resolve(keras, environ)` for tasks that run with this machine's packages.

  Raises:
    ValueError: the choice is tf_keras and tf_keras is not installed here (Keras 3
      alone, as TensorFlow 2.16 and later install it); the message names where the
      choice came from (`keras`, spelled `given_as`, or TF_USE_LEGACY_KERAS) and both
      fixes. Without this, every task would fail inside TensorFlow at its first
      `tf.keras`.
  """
  environ = os.environ if environ is None else environ
  chosen = resolve(keras, environ)
  if chosen == keras_support.TF_KERAS and not keras_support.tf_keras_installed():
    source = (given_as if keras else
              f"{LEGACY_KERAS_ENV}={environ.get(LEGACY_KERAS_ENV)}")
    raise ValueError(str(keras_support.tf_keras_missing(source, keras3_instead=True)))
  return chosen


def variables(keras: Optional[str] = None,
              environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
  """The variables a task's environment gets for `keras` (see the module doc)."""
  environ = os.environ if environ is None else environ
  chosen = resolve(keras, environ)
  return {LEGACY_KERAS_ENV: "1" if chosen == keras_support.TF_KERAS else "0",
          "PYTHONPATH": python_path(environ)}


def python_path(environ: Optional[Mapping[str, str]] = None) -> str:
  """`environ`'s PYTHONPATH with the task site first, once (for `tfdist task` in a pod too)."""
  environ = os.environ if environ is None else environ
  paths = environ.get("PYTHONPATH", "").split(os.pathsep)
  return os.pathsep.join([SITE_DIR] + [p for p in paths if p and p != SITE_DIR])


def enable_keras3_callbacks_on_import() -> None:
  """Keras 3's own file-writing callbacks write once under multi-worker strategies, from their import on.

  For the task site: `tfdist.internals.keras_callbacks.enable_chief_writes`
  once Keras 3's callbacks module has executed, with BackupAndRestore's restored
  position handed to `tfdist.data.replay.read_on_keras3_fit`, so that a
  restarted `fit` reads on after the batch it backed up.
  """
  from tfdist.internals import keras_callbacks

  def enable(module):
    from tfdist.data import replay  # Once Keras 3 is imported: TensorFlow is too.
    keras_callbacks.enable_chief_writes(on_restore=replay.read_on_keras3_fit)

  task_imports.after_import(keras_callbacks.CALLBACKS_MODULE, enable)
