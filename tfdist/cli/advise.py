"""`tfdist advise`: which strategy should I use? Measured here, then one recommendation.

  tfdist advise [--model my_model.py] [--data my_data.py] [--workers N]
                [--devices_per_worker K] [--memory_per_device GB]

Measures only what it must, and never trains to convergence:
  1. in one fresh process with K devices (logical CPUs stand in for GPUs on
     a machine without any), the model's memory per replica, then, side by
     side, one device at --per_replica_batch_size and at the largest global
     batch, and with K > 1 mirrored and central storage over the K devices,
     and, when the model does not fit --memory_per_device, its layers split
     over them with micro-batches (model parallelism);
  2. with N > 1 workers: a 2-worker cluster on this machine, for the step it
     runs, the per-step latency and the all-reduce bandwidth (unless
     --busbw_gbps and --latency_ms give the links of your network);
  3. the default job or --data: a 2-epoch run's share of time waiting for input.
About 30 s on 2 cores, 50 s with --workers 2 (the compute-bound convnet: 2
minutes). Then `tfdist.advice.decision` ranks the ways by examples/s, measured
or predicted with the α-β model of `tfdist scale`, and says why, with the
batch, learning-rate, communication, memory and input settings. The measuring
is `tfdist.advice._advice` (`tfdist.advise` in Python); this main parses flags
and prints.

--model is `cnn` (the default job's), `convnet`, `mlp` (see `tfdist scale`),
or your .py file / module defining model_fn().
"""

import json
import sys

from absl import flags

_MODEL = flags.DEFINE_string("model", "cnn", "cnn, convnet, mlp, or a .py file / module "
                             "with model_fn().")
_DATA = flags.DEFINE_string("data", None, "Your data (as for tfdist train --data), to measure "
                            "how much of a step waits for input. The default job's digits "
                            "are measured with --model=cnn.")
# Per replica: the ways it compares train on different numbers of replicas.
_PER_REPLICA_BATCH_SIZE = flags.DEFINE_integer(
    "per_replica_batch_size", 64, "Examples each replica (device) computes per step; the "
    "global batch is this times the replicas.", lower_bound=1)
_WORKERS = flags.DEFINE_integer("workers", 1, "Workers in your cluster.", lower_bound=1)
_DEVICES_PER_WORKER = flags.DEFINE_integer(
    "devices_per_worker", 0, "Devices per worker (0: this machine's GPUs, or with none, one "
    "logical CPU device per core standing in for them).", lower_bound=0)
_COLOCATED = flags.DEFINE_bool("colocated", True, "The workers are processes on this machine "
                               "(as tfdist launch starts them); --nocolocated: separate "
                               "machines like this one.")
_MEMORY_PER_DEVICE = flags.DEFINE_float("memory_per_device", None, "GB of memory per device "
                                        "(default: no limit).", lower_bound=0)
_BUSBW_GBPS = flags.DEFINE_float("busbw_gbps", None, "Your network's all-reduce bus bandwidth, "
                                 "GB/s (default: measured between 2 local workers).",
                                 lower_bound=0)
_LATENCY_MS = flags.DEFINE_float("latency_ms", None, "Your network's per-step latency on 2 "
                                 "workers, ms (default: measured between 2 local workers).",
                                 lower_bound=0)
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 1e-2, "Your one-replica learning rate, "
                                    "to scale.", lower_bound=0)
_MICRO_BATCHES = flags.DEFINE_integer("micro_batches", 0, "Model parallelism's micro-batches "
                                      "(0: twice the devices).", lower_bound=0)
_STEPS = flags.DEFINE_integer("steps", 20, "Steps per timed fit, at least (more when a fit "
                             "would take under half a second).", lower_bound=5)
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed fits per way, interleaved (the fastest "
                                "counts).", lower_bound=1)
_TIMEOUT = flags.DEFINE_float("timeout", 300, "Seconds allowed per measuring process.",
                              lower_bound=1)
_CHECK = flags.DEFINE_bool("check", False, "Also time every way considered in fits "
                           "--check_longer times as long, in the same processes and rounds "
                           "as the advice's, and show whether the pick is the fastest "
                           "(within 5%) and each examples/s within 15% of the advice's. "
                           "A benchmark: minutes.")
_CHECK_LONGER = flags.DEFINE_integer("check_longer", 4, "--check: how many times longer the "
                                     "check's fits are than the advice's.", lower_bound=1)
_OUTPUT = flags.DEFINE_string("output", None, "Write the advice and measurements as JSON here.")


def main(argv):
  del argv
  from tfdist.advice import _advice as advice  # Deferred: `tfdist advise --help` loads nothing.
  try:
    options = advice.AdviseOptions(
        model=_MODEL.value, data=_DATA.value, batch_size=_PER_REPLICA_BATCH_SIZE.value,
        workers=_WORKERS.value, devices_per_worker=_DEVICES_PER_WORKER.value,
        colocated=_COLOCATED.value, memory_per_device_gb=_MEMORY_PER_DEVICE.value,
        busbw_gbps=_BUSBW_GBPS.value, latency_ms=_LATENCY_MS.value,
        learning_rate=_LEARNING_RATE.value, micro_batches=_MICRO_BATCHES.value,
        steps=_STEPS.value, repeats=_REPEATS.value, timeout=_TIMEOUT.value,
        check=_CHECK.value, check_longer=_CHECK_LONGER.value)
    result = advice.run(options)
  except ValueError as e:  # A bad --model or --data, before anything is measured.
    print(f"tfdist advise: {e}", file=sys.stderr)
    return 2
  except advice.MeasurementError as e:
    print(f"tfdist advise: {e}", file=sys.stderr)
    return 1
  print(f"\n{result.advice}\n\nmeasured in {result.seconds:.0f} s.")
  if result.check is not None:
    print(f"\n{result.check}")
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump(result.as_dict(), f, indent=1)
  return 0
