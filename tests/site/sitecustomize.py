"""Imported by every Python process the suite starts (tests/conftest.py puts this folder on
PYTHONPATH; a tfdist task imports it after tfdist's own task site).

At exit, Python collects every reference cycle once more before it frees the modules. In a
process that imported TensorFlow and Keras that pass walks millions of objects: about 0.7 s
of CPU of the 3-4 s such a process costs here (docs/suite-time.md). Freezing the heap at
exit skips it, as `gc.freeze()` documents; the exit handlers, `weakref.finalize` callbacks
and the flush of stdout and stderr still run. What is skipped is the `__del__` of objects
still in a cycle at exit, which Python does not promise to call; no test relies on one.
Then the sitecustomize further down the path runs (benchmarks/census/ for a census run).
"""

import atexit
import gc
import importlib.machinery
import importlib.util
import os
import sys

# Registered first, so it runs last: after every exit handler the process registers later.
atexit.register(gc.freeze)

# Only the path after this folder: a site before it (a tfdist task's) handed over to this one.
_here = os.path.dirname(os.path.abspath(__file__))
_path = [os.path.abspath(p or ".") for p in sys.path]
_next = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", _path[_path.index(_here) + 1:] if _here in _path else [])
if _next is not None and _next.loader is not None:
  _next.loader.exec_module(importlib.util.module_from_spec(_next))
