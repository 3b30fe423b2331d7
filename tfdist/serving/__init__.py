"""Serving with request batching, measured: a SavedModel behind TensorFlow's batching op.

- `measure_serving`: a SavedModel (`tfdist.export`'s) behind TensorFlow's
  batching op and a loopback HTTP server, under concurrent clients (`run_load`),
  for every setting of a grid (`Batching`); `serving_table` prints the rows;
- `choose_batching`: the setting with the highest throughput whose p99 latency
  meets a target, and `batching_parameters_text`: TF Serving's batching file
  for it (`tfdist bench --suites=serving`);
- `write_trivial_model` and `trivial_overhead`: what the HTTP and JSON round
  trip costs without the model;
- `batched`: that op around a loaded SavedModel, to call from threads.

Example:

    >>> from tfdist import serving
    >>> rows = serving.measure_serving({"model": path}, [serving.Batching(8, 0)])
    >>> print(serving.serving_table(rows))
"""

import importlib
from typing import TYPE_CHECKING

# TensorFlow loads in the servers and in write_trivial_model, not on import.
from tfdist.serving._load_generator import Load, run_load
from tfdist.serving._serving import (Batching, ServingMeasurement, batching_parameters_text,
                                     choose_batching, measure_serving, serving_table,
                                     trivial_overhead, write_trivial_model)

# Names from modules that import TensorFlow at the top, loaded on first use.
_LAZY = {"batched": "tfdist.serving._batching_server"}
if TYPE_CHECKING:  # What the reference's static reader sees; `__getattr__` loads it.
  from tfdist.serving._batching_server import batched  # pylint: disable=unused-import
__all__ = ["Batching", "Load", "ServingMeasurement", "batching_parameters_text",
           "choose_batching", "measure_serving", "run_load", "serving_table", "trivial_overhead",
           "write_trivial_model"]
__all__ += list(_LAZY)


def __getattr__(name):
  if name in _LAZY:
    return getattr(importlib.import_module(_LAZY[name]), name)
  raise AttributeError(f"module 'tfdist.serving' has no attribute {name!r}")


def __dir__():
  return __all__
