"""Imported by every Python task `tfdist launch` starts (see tfdist.task._keras).

Enables tfdist's Keras 3 multi-worker workaround when, and only when, the task
imports Keras 3's TensorFlow trainer (`tfdist.internals.keras`), chief-only
writes for Keras 3's own callbacks when it imports them, and the trains-alone
check (`tfdist.task._trains_alone`) when it imports TensorFlow; then hands
over to the sitecustomize this one shadows, if there is one.
"""

import importlib.machinery
import importlib.util
import os
import sys

try:
  from tfdist.internals import keras as keras_internals
  from tfdist.task import _keras as task_keras
  from tfdist.task import _trains_alone as trains_alone
except ImportError:  # A task run by a Python without tfdist: nothing to enable.
  keras_internals = None
if keras_internals is not None:
  from tfdist.task import _imports as task_imports
  task_imports.after_import(keras_internals.TRAINER_MODULE,
                            lambda _: keras_internals.enable_multi_worker())
  # Keras 3's own callbacks write once; a task that would train alone is told so.
  task_keras.enable_keras3_callbacks_on_import()
  trains_alone.install()
  # The launcher's stall watchdog: steps and stacks of this task (tfdist.task.progress),
  # every Keras `fit` reporting them once either Keras is imported.
  from tfdist.internals import fit_callbacks
  from tfdist.task import progress
  if progress.install_from_env():
    for _name in fit_callbacks.KERAS_MODULES:
      task_imports.after_import(_name, lambda _: fit_callbacks.enable_fit_callbacks(
          progress.keras_callbacks, progress.stamped_input))
  # Workers whose models or versions differ are refused, naming what (tfdist.strategies._fingerprint).
  task_imports.after_import("tensorflow", lambda _: importlib.import_module(
      "tfdist.strategies._fingerprint").enable_for_every_scope())

_HERE = os.path.dirname(os.path.abspath(__file__))
# Hand over to the sitecustomize further down the path, as if this one were not here. Only
# the path after this folder: another tfdist's task site after it would hand back up to this
# one, for ever.
_path = [os.path.abspath(p or ".") for p in sys.path]
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", _path[_path.index(_HERE) + 1:] if _HERE in _path else [])
if _spec is not None and _spec.loader is not None:
  _module = importlib.util.module_from_spec(_spec)
  _spec.loader.exec_module(_module)
