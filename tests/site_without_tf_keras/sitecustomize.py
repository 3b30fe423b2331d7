"""A Python without tf_keras, as TensorFlow 2.16 and later install it (Keras 3 alone).

For tests of that stack in the suite's own virtualenv: `helpers.without_tf_keras()` puts this
folder after tests/site on PYTHONPATH, whose sitecustomize hands over to this one. From then
on `import tf_keras` fails as for a package that is not installed, `importlib.util.find_spec`
finds nothing, and the package metadata (what `tfdist doctor` and `pip` read) lists no
tf-keras: the path finder, wrapped, skips them. Nothing else changes.
"""

import importlib.machinery
import sys

_PACKAGE = "tf_keras"
_DISTRIBUTIONS = ("tf-keras", "tf-keras-nightly")


class _WithoutTfKeras(importlib.machinery.PathFinder):
  """The path finder, blind to tf_keras."""

  @classmethod
  def find_spec(cls, fullname, path=None, target=None):
    if fullname.split(".")[0] == _PACKAGE:
      return None
    return super().find_spec(fullname, path, target)

  @classmethod
  def find_distributions(cls, *args, **kwargs):
    for distribution in super().find_distributions(*args, **kwargs):
      name = (distribution.metadata["Name"] or "").lower().replace("_", "-")
      if name not in _DISTRIBUTIONS:
        yield distribution


sys.meta_path[:] = [_WithoutTfKeras if finder is importlib.machinery.PathFinder else finder
                    for finder in sys.meta_path]
