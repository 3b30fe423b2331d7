"""The TensorFlow stack installed here, read from package metadata: imports none of it.

tfdist leaves TensorFlow to the user, as Keras and TensorFlow Datasets do: a
container's or cloud image's `tensorflow`, `tensorflow-cpu` or
`tensorflow[and-cuda]` stays as it is (docs/get-started/install.md). This module
says which one is installed, whether its versions are in the ranges tfdist
supports (`SUPPORTED`: `make test` runs 2.21, `make test-versions` the oldest and the
newest), and what to pin (`constraints`).

Example:

    >>> from tfdist import _stack
    >>> _stack.tensorflow_distributions()
    [('tensorflow', '2.21.0')]
"""

import importlib.metadata
from typing import Dict, List, Optional, Tuple

from tfdist.internals import versions

Version = versions.Version

# Inclusive (major, minor) ranges tfdist supports: `make test` runs TensorFlow 2.21 and
# `make test-versions` the oldest and the newest (Keras 3: the versions its patches were
# run with).
# Each gate of tfdist.internals is this range or, where a use was run on fewer, inside it.
SUPPORTED: Dict[str, Tuple[Version, Version]] = {
    "tensorflow": ((2, 17), (2, 22)),
    "tf_keras": ((2, 17), (2, 22)),
    "keras": ((3, 12), (3, 16)),
}
PYTHON = ((3, 10), (3, 13))
# Distributions that install the `tensorflow` package. The nightlies are accepted, untested.
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-intel",
                            "tensorflow-macos", "tf-nightly", "tf-nightly-cpu")
NIGHTLIES = ("tf-nightly", "tf-nightly-cpu")
# Keras 3, released or the nightly a TensorFlow release candidate installs.
KERAS_DISTRIBUTIONS = ("keras", "keras-nightly")
# tf_keras, released or the nightly of a TensorFlow that has no tf_keras release yet (2.22:
# `pip install --no-deps 'tf-keras-nightly~=2.22.0.dev'`, docs/get-started/install.md).
TF_KERAS_DISTRIBUTIONS = ("tf-keras", "tf-keras-nightly")
# What `tensorflow[and-cuda]` adds: NVIDIA's CUDA libraries as packages.
_AND_CUDA_MARKER = "nvidia-cudnn-cu12"
# The stack's distributions, in the order a constraints file lists them.
STACK = TENSORFLOW_DISTRIBUTIONS + TF_KERAS_DISTRIBUTIONS + KERAS_DISTRIBUTIONS + (
    "tensorboard", "tensorflow-datasets", "tensorflow-metadata", "protobuf", "numpy")
# tfdist is not on a package index yet: its extras install from a clone (or its wheel).
INSTALL = ("in a clone of tfdist, pip install '.[tensorflow]' (or '.[and-cuda]' for NVIDIA "
           "GPUs; a `tensorflow-cpu` you install yourself is used as it is)")


def installed(distribution: str) -> Optional[str]:
  """The installed version of `distribution` (a pip name), or None."""
  try:
    return importlib.metadata.version(distribution)
  except importlib.metadata.PackageNotFoundError:
    return None


def tensorflow_distributions() -> List[Tuple[str, str]]:
  """[(distribution, version)] of each installed distribution of the `tensorflow` package.

  `tensorflow[and-cuda]` shows as "tensorflow[and-cuda]". More than one means they
  overwrote each other's files (`tensorflow` installed over `tensorflow-cpu`).
  """
  found = []
  for name in TENSORFLOW_DISTRIBUTIONS:
    version = installed(name)
    if version is None:
      continue
    if name == "tensorflow" and installed(_AND_CUDA_MARKER) is not None:
      name = "tensorflow[and-cuda]"
    found.append((name, version))
  return found


def outside(library: str, version: str) -> Optional[str]:
  """Why `version` of `library` ("tensorflow", "tf_keras", "keras") is not supported, or None."""
  low, high = SUPPORTED[library]
  if low <= versions.parse(version) <= high:
    return None
  return (f"{library} {version} is outside what tfdist supports ({low[0]}.{low[1]} to "
          f"{high[0]}.{high[1]})")


def missing(module: str, what: str = "", keras3_instead: bool = True) -> str:
  """The error for a `tensorflow` or `tf_keras` that is not installed, with the fix.

  `what` names the tf_keras-only part that was used (default: `tfdist.keras`);
  `keras3_instead` says Keras 3 is the other way (where `what` chose the Keras).
  """
  if module == "tf_keras":
    tf = tensorflow_distributions()
    newest = SUPPORTED["tensorflow"][1]
    minor = ".".join(tf[0][1].split(".")[:2]) if tf else f"{newest[0]}.{newest[1]}"
    needs = f"{what} needs tf_keras" if what else "tfdist.keras is tf_keras"
    return (f"{needs}, which is not installed. Install the one of your "
            f"TensorFlow's minor version: pip install 'tf-keras=={minor}.*' (add --no-deps "
            "beside tensorflow-cpu: tf-keras requires the `tensorflow` distribution; where none "
            f"is released yet, pip install --no-deps 'tf-keras-nightly~={minor}.0.dev')"
            + (", or use Keras 3 (`import keras`; `--keras=keras3`)" if keras3_instead else "")
            + ". Received: no module named 'tf_keras'")
  low, high = SUPPORTED["tensorflow"]
  return (f"tfdist needs TensorFlow {low[0]}.{low[1]} to {high[0]}.{high[1]}, and none is "
          f"installed: {INSTALL}. Received: no module named {module!r}")


def constraints() -> List[str]:
  """`name==version` of each installed distribution of the stack: a `pip install -c` file."""
  return [f"{name}=={version}" for name in STACK
          for version in [installed(name)] if version is not None]
