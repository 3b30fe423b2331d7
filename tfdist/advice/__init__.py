"""Which strategy, and how will it scale: `tfdist advise` and `tfdist scale`.

- `advise` (`tfdist.advise`): measures the ways to train a model here and
  recommends one (`AdviseOptions`, `AdviseResult`, `MeasurementError`);
- `decision`: the decision table behind it (`decide`);
- `memory`: the bytes one replica holds (weights, gradients, slots, activations);
- `scaling_model`: the α-β model of a synchronous step;
- `scale`: measuring compute, latency and bandwidth on 1 and 2 workers, and
  checking the α-β model against them (`tfdist scale`).

Every timer here uses `tfdist.training.timing`'s epoch clock, which `tfdist train`
uses too.

Example:

    >>> from tfdist import advice
    >>> result = advice.advise("my_model.py", workers=4)
    >>> print(result.advice)
"""

import importlib
from typing import TYPE_CHECKING

# Everything loads on first use: `import tfdist.advice` loads no TensorFlow.
_SUBMODULES = ("decision", "memory", "scale", "scaling_model")
_LAZY = {name: "tfdist.advice._advice"
         for name in ("advise", "AdviseOptions", "AdviseResult", "MeasurementError")}
if TYPE_CHECKING:  # What the reference's static reader sees; `__getattr__` loads it.
  from tfdist.advice._advice import (AdviseOptions, AdviseResult,  # pylint: disable=unused-import
                                     MeasurementError, advise)
__all__ = list(_LAZY) + list(_SUBMODULES)


def __getattr__(name):
  if name in _LAZY:
    return getattr(importlib.import_module(_LAZY[name]), name)
  if name not in _SUBMODULES:
    raise AttributeError(f"module 'tfdist.advice' has no attribute {name!r}")
  return importlib.import_module(f"{__name__}.{name}")


def __dir__():
  return __all__
