"""Imported by every Python process the suite starts (tests/conftest.py puts this folder on
PYTHONPATH; a tfdist task imports it after tfdist's own task site).

At exit, Python collects every reference cycle once more before it frees the modules. In a
process that imported TensorFlow and Keras that pass walks millions of objects: about 0.7 s
of CPU of the 3-4 s such a process costs here (docs/suite-time.md). Freezing the heap at
exit skips it, as `gc.freeze()` documents; the exit handlers, `weakref.finalize` callbacks
and the flush of stdout and stderr still run. What is skipped is the `__del__` of objects
still in a cycle at exit, which Python does not promise to call; no test relies on one.

Keras 3 imports `matplotlib.pyplot` with itself (for `keras.visualization`), and TensorFlow
imports Keras 3 with itself: about 0.3 s of CPU in every such process, though few of the
suite's ever draw. Here pyplot loads on its first use instead (`importlib.util.LazyLoader`);
a notebook that draws loads it at its first `plt.` call and shows its figure as before.

Python's first garbage collection waits for more new objects than its default, and the
per-test freeze in tests/conftest.py keeps what outlives a test out of later collections.

Then the sitecustomize further down the path runs (benchmarks/census/ for a census run).
"""

import atexit
import gc
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

# Registered first, so it runs last: after every exit handler the process registers later.
atexit.register(gc.freeze)

# The first collection runs after 50,000 new objects instead of 700: importing TensorFlow and
# Keras creates hundreds of thousands that live as long as the process, and at 700 Python
# walks them again in about 700 collections, five of them full: about 0.5 s of CPU per
# process (docs/suite-time.md, "A collection after every test"). Cycles are still
# collected, later.
GC_THRESHOLD = (50_000, 20, 10)
gc.set_threshold(*GC_THRESHOLD)


class _PyplotOnFirstUse(importlib.abc.MetaPathFinder):

  def find_spec(self, name, path, target=None):
    if name != "matplotlib.pyplot":
      return None
    spec = importlib.machinery.PathFinder.find_spec(name, path, target)
    if spec is not None and spec.loader is not None:
      spec.loader = importlib.util.LazyLoader(spec.loader)
    return spec


sys.meta_path.insert(0, _PyplotOnFirstUse())

# Only the path after this folder: a site before it (a tfdist task's) handed over to this one.
_here = os.path.dirname(os.path.abspath(__file__))
_path = [os.path.abspath(p or ".") for p in sys.path]
_next = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", _path[_path.index(_here) + 1:] if _here in _path else [])
if _next is not None and _next.loader is not None:
  _next.loader.exec_module(importlib.util.module_from_spec(_next))
