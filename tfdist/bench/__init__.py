"""Measurement: tfdist against raw TensorFlow, side by side in one run.

- `harness`: interleaved variants, `interleaved_ratio`, `fit` timers;
- `models`: the models the benchmarks time;
- `overhead`: tfdist strategies against raw `tf.distribute` ones;
- `allreduce`: one all-reduce timed per way of sending it, and TCP's yardstick;
- `scaling_model`: the α-β model of a synchronous step;
- `scale`: measuring compute, latency and bandwidth on 1 and 2 workers, and
  checking the α-β model against them (`tfdist scale`);
- `memory`: the bytes one replica holds (weights, gradients, slots, activations);
- `candidates`: the ways of training on one machine, timed side by side;
- `decision`: `tfdist advise`'s decision table (`decide`);
- `advice_check`: an advice held to longer measurements (`check`);
- `advise`: the measuring processes and `tfdist.advise`;
- serving with request batching (`measure_serving`, `choose_batching`,
  `batching_parameters_text`): a SavedModel behind TensorFlow's batching op and
  a loopback HTTP server, under concurrent clients (`run_load`), and TF
  Serving's batching file for a latency target (`tfdist bench --suites=serving`);
  `batched` is that op around a loaded SavedModel, to call from threads;
- the all-reduce family (`all_reduce_schedule`, `textbook_cost`, `run_all_reduce`):
  all-to-all, master-worker, tree, round-robin, butterfly and ring, counted
  round by round and run with TensorFlow's sends and receives (notebook 06).

Every timer here uses `tfdist.training.timing`'s epoch clock, which `tfdist train` uses
too. Nothing here asserts a speed; `tfdist bench`, `tfdist scale` and the scripts
in `benchmarks/` print and save ratios.
"""

import importlib
from typing import TYPE_CHECKING

# Plain Python until run_all_reduce is called: importing them loads no TensorFlow.
from tfdist.bench._all_reduce_family import (ALL_REDUCE_ALGORITHMS, AllReduceCost,
                                             AllReduceSchedule, AllReduceMessage, all_reduce_schedule,
                                             run_all_reduce, textbook_cost)
# Serving with request batching: TensorFlow loads in the servers and in write_trivial_model.
from tfdist.bench._load_generator import Load, run_load
from tfdist.bench._serving import (Batching, ServingMeasurement, batching_parameters_text,
                                   choose_batching, measure_serving, serving_table,
                                   trivial_overhead, write_trivial_model)

# Public submodules, loaded on first use: `import tfdist.bench` loads no TensorFlow.
# `_advice` and `_advice_check` are reached through `tfdist.advise`.
_SUBMODULES = ("allreduce", "candidates", "collectives", "decision", "harness", "memory",
               "models", "overhead", "scale", "scaling_model")
# Names from modules that import TensorFlow at the top, loaded on first use too.
_LAZY = {"batched": "tfdist.bench._batching_server"}
if TYPE_CHECKING:  # What the reference's static reader sees; `__getattr__` loads it.
  from tfdist.bench._batching_server import batched  # pylint: disable=unused-import
__all__ = list(_SUBMODULES) + ["ALL_REDUCE_ALGORITHMS", "AllReduceCost", "AllReduceSchedule",
                               "AllReduceMessage", "all_reduce_schedule", "run_all_reduce",
                               "textbook_cost"]
__all__ += ["Batching", "Load", "ServingMeasurement", "batching_parameters_text",
            "choose_batching", "measure_serving", "run_load", "serving_table", "trivial_overhead",
            "write_trivial_model"]
__all__ += list(_LAZY)


def __getattr__(name):
  if name in _LAZY:
    return getattr(importlib.import_module(_LAZY[name]), name)
  if name not in _SUBMODULES:
    raise AttributeError(f"module 'tfdist.bench' has no attribute {name!r}")
  return importlib.import_module(f"{__name__}.{name}")


def __dir__():
  return __all__
