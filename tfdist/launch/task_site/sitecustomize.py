"""Imported by every Python task `tfdist launch` starts (see tfdist.launch.task_keras).

Enables tfdist's Keras 3 multi-worker workaround when, and only when, the task
imports Keras 3's TensorFlow trainer (`tfdist.internals.keras`); then hands
over to the sitecustomize this one shadows, if there is one.
"""

import importlib.machinery
import importlib.util
import os
import sys

try:
  from tfdist.internals import keras as keras_internals
except ImportError:  # A task run by a Python without tfdist: nothing to enable.
  keras_internals = None
if keras_internals is not None:
  keras_internals.enable_multi_worker_on_import()

_HERE = os.path.dirname(os.path.abspath(__file__))
# Hand over to the sitecustomize further down the path, as if this one were not here.
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _HERE])
if _spec is not None and _spec.loader is not None:
  _module = importlib.util.module_from_spec(_spec)
  _spec.loader.exec_module(_module)
