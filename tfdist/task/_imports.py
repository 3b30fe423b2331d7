"""Running a function right after a module first executes: tasks, and Keras 3's patches.

The task site (`tfdist.task._keras`) runs before the user's script,
which may never import TensorFlow or Keras; what tfdist enables in them waits
for their import, so a process that never imports them loads nothing. A
multi-worker `make_strategy` waits in the same way to patch Keras 3. A hook
waits until the module executes: a bare `importlib.util.find_spec` (TensorFlow
asks for "keras" without importing it) leaves it waiting.

Example:

    after_import("keras.src.callbacks", lambda module: print("Keras callbacks loaded"))
"""

import importlib.abc
import logging
import sys
from typing import Callable

logger = logging.getLogger("tfdist")


def after_import(name: str, function: Callable[[object], None]) -> None:
  """Calls `function(module)` right after module `name` first executes (at once if it has).

  An exception in `function` is logged as a warning, never raised into the import. The
  same `function` waits for `name` once, however often it is asked for.
  """
  if name in sys.modules:
    _call(function, sys.modules[name])
    return
  if not any(isinstance(finder, _AfterImport) and finder.name == name and
             finder.function is function for finder in sys.meta_path):
    sys.meta_path.insert(0, _AfterImport(name, function))


def _call(function, module) -> None:
  try:
    function(module)
  except Exception as e:  # pylint: disable=broad-except  Never break the user's import.
    logger.warning("tfdist: what it enables after importing %s was not enabled: %r",
                   module.__name__, e)


class _AfterImport(importlib.abc.MetaPathFinder):
  """Finds module `name` as Python would, and runs `function` after it executes."""

  def __init__(self, name, function):
    self.name, self.function = name, function
    self.finding = False  # Asking the other finders, which may include this one.

  def find_spec(self, fullname, path=None, target=None):
    if fullname != self.name or self.finding:
      return None
    # The finders after this one, as if it were not there (another hook may wait too).
    self.finding = True
    try:
      for finder in list(sys.meta_path):
        spec = finder.find_spec(fullname, path, target) if finder is not self and hasattr(
            finder, "find_spec") else None
        if spec is not None:
          break
      else:
        return None
    finally:
      self.finding = False
    if spec.loader is None or isinstance(spec.loader, type) or \
        not hasattr(spec.loader, "exec_module"):
      return spec
    execute = spec.loader.exec_module

    def exec_module(module):
      execute(module)
      # Done once executed, not when found: a find_spec alone imports nothing.
      if self in sys.meta_path:
        sys.meta_path.remove(self)
        _call(self.function, module)

    spec.loader.exec_module = exec_module
    return spec
