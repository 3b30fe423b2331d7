"""`tfdist scale`: how well will this model scale, predicted and checked here.

Measures, with each worker pinned to its own core:
  1. compute: the fit step time of the model on 1 worker (MWMS, as the
     workers run it);
  2. on 2 workers, interleaved:
     - the step of a copy of the model trained with no strategy on both at
       once, against the same alone in the 1-worker run: what sharing this
       machine's caches and memory bandwidth costs, which separate machines
       would not pay;
     - the same two steps at batch 1, whose difference is the step's
       communication with almost no compute: its latency, once the bytes
       are taken out;
     - the bus bandwidth of a 16 MB (or gradient-sized, if larger) all-reduce;
     - the synchronous 2-worker step itself, at the chosen batch;
alternating 1- and 2-worker runs --pairs times and taking medians.
Then predicts the efficiency at 2, 4, 8 ... replicas on separate machines with
the α-β model (tfdist/advice/scaling_model.py; the measurement is
tfdist/advice/scale.py), checks the model against the
2-worker measurement here (with the co-located compute in place of the
compute), draws the curve to a PNG and says what to do.

--compress_gradients measures and predicts with float16 all-reduces.

--model is `cnn` (the default job's), `convnet` (compute-bound: 0.9 MB of
gradients, ~0.7 ms of compute per example here), `mlp` (784-512-512-10,
communication-bound: 2.6 MB of gradients), or your .py file
or module defining model_fn(); tfdist compiles an uncompiled model with SGD
and MSE on random data of its input and output shapes, which is all timing
needs.
"""

import json
import sys

from absl import flags

from tfdist import _choices as choices
from tfdist import output
from tfdist.cli import self_launch

# Its workers time tf_keras models (tfdist._lab): refused up front where tf_keras is not installed.
NEEDS_TF_KERAS = True

_MODEL = flags.DEFINE_string("model", "cnn", "cnn, convnet, mlp, or a .py file / module "
                             "with model_fn().")
# Per replica: the 1- and 2-worker runs compare the same work per replica.
_PER_REPLICA_BATCH_SIZE = flags.DEFINE_integer(
    "per_replica_batch_size", 64, "Examples each replica (one per worker) computes per step; "
    "the global batch is this times the workers.", lower_bound=1)
_STEPS = flags.DEFINE_integer("steps", 50, "Steps per timed fit.", lower_bound=5)
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed fits per measurement (median).",
                                lower_bound=1)
_PAIRS = flags.DEFINE_integer("pairs", 3, "1-worker and 2-worker runs, alternated; the "
                              "efficiency is the median over pairs.", lower_bound=1)
_COMPRESS_GRADIENTS = flags.DEFINE_bool("compress_gradients", False, "All-reduce the "
                                        "gradients in float16 (tfdist.compress_gradients).")
_PLOT = flags.DEFINE_string("plot", "scaling.png", "Where the PNG goes ('' for none).")
_OUTPUT = flags.DEFINE_string("output", None, "Write the numbers as JSON here.")
_RESULT_FILE = flags.DEFINE_string(self_launch.RESULT_FLAG, None,
                                   "Internal: worker 0 writes here.")


def main(argv):
  del argv
  if self_launch.launched_by_itself(_RESULT_FILE.value):
    return _worker()
  from tfdist.advice import scale
  from tfdist.advice import scaling_model
  # Alternated, because on a shared VM a process's step time can sit on a
  # level 2x off for its whole life (docs/measuring.md); one pair can be a fluke.
  pairs = []
  stages = output.Stages(2 * _PAIRS.value)
  for _ in range(_PAIRS.value):
    one, two = _measure(1, stages), _measure(2, stages)
    if one is None or two is None:
      return 1
    pairs.append((one, two))
  r = scale.analyse(pairs)
  counts = pairs[0][1]  # The 2-worker run's trace; the same in every run.
  batch = _PER_REPLICA_BATCH_SIZE.value
  print(r.text(model=_MODEL.value, per_replica_batch_size=batch, counts=counts,
               compressed=_COMPRESS_GRADIENTS.value))
  if _PLOT.value:
    try:
      path = scaling_model.plot(
          _PLOT.value, r.predictions,
          [scaling_model.Prediction(1, r.compute, 1.0),
           scaling_model.Prediction(2, r.two_step, r.measured)],
          title=f"{_MODEL.value}: {r.gradient_bytes / 2**20:.2f} MB gradients")
      print(f"curve: {path}")
    except ImportError as e:
      print(f"no curve: {e}")
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump(r.as_dict(per_replica_batch_size=batch, counts=counts), f, indent=1)
  return 0


def _measure(workers: int, stages):
  from tfdist.cluster import ClusterSpec
  print(stages.next(f"measuring on {workers} worker(s)"), flush=True)
  return self_launch.run_for_result("scale", sys.modules[__name__],
                                    ClusterSpec.local(workers=workers), timeout=900)


def _model_fn():
  from tfdist._lab import models
  return models.model_fn(_MODEL.value)


def _worker() -> int:
  import os
  import tfdist
  from tfdist.advice import scale
  from tfdist.cluster import ClusterSpec
  spec = ClusterSpec.from_env()
  # One core per worker, so that 2 workers have twice the compute of 1.
  scale.pin_to_core(spec.task.index % os.cpu_count())
  strategy = tfdist.make_strategy(choices.Name.MULTI_WORKER_MIRRORED, communication="ring")
  result = scale.measure_worker(strategy, _model_fn(),
                                batch_size=_PER_REPLICA_BATCH_SIZE.value, steps=_STEPS.value,
                                repeats=_REPEATS.value,
                                compress_gradients=_COMPRESS_GRADIENTS.value,
                                seed=spec.task.index)
  self_launch.write_result(_RESULT_FILE.value, result)
  return 0
