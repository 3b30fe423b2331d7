"""Imported by every Python task `tfdist launch` starts (see tfdist.launch.task_keras).

Enables tfdist's Keras 3 multi-worker workaround when, and only when, the task
imports Keras 3's TensorFlow trainer; then hands over to the sitecustomize this
one shadows, if there is one.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_TRAINER = "keras.src.backend.tensorflow.trainer"
_HERE = os.path.dirname(os.path.abspath(__file__))


class _EnableAfterImport(importlib.abc.MetaPathFinder):
  """Runs the workaround right after Keras 3's trainer module has executed."""

  def find_spec(self, fullname, path=None, target=None):
    if fullname != _TRAINER:
      return None
    sys.meta_path.remove(self)
    spec = importlib.machinery.PathFinder.find_spec(fullname, path)
    if spec is None or spec.loader is None:
      return spec
    execute = spec.loader.exec_module

    def exec_module(module):
      execute(module)
      try:
        from tfdist import keras3_workarounds
        keras3_workarounds.enable_multi_worker()
      except Exception as e:  # Never break the user's import of Keras.
        print(f"[tfdist] Keras 3 multi-worker workaround not applied: {e!r}", file=sys.stderr)

    spec.loader.exec_module = exec_module
    return spec


sys.meta_path.insert(0, _EnableAfterImport())

# Hand over to the sitecustomize further down the path, as if this one were not here.
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _HERE])
if _spec is not None and _spec.loader is not None:
  _module = importlib.util.module_from_spec(_spec)
  _spec.loader.exec_module(_module)
