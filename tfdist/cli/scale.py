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
the α-β model (tfdist/scaling_analysis.py), checks the model against the
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
import os
import statistics
import sys
import tempfile

from absl import flags

_MODEL = flags.DEFINE_string("model", "cnn", "cnn, convnet, mlp, or a .py file / module "
                             "with model_fn().")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "Per-replica batch.", lower_bound=1)
_STEPS = flags.DEFINE_integer("steps", 50, "Steps per timed fit.", lower_bound=5)
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed fits per measurement (median).",
                                lower_bound=1)
_PAIRS = flags.DEFINE_integer("pairs", 3, "1-worker and 2-worker runs, alternated; the "
                              "efficiency is the median over pairs.", lower_bound=1)
_COMPRESS_GRADIENTS = flags.DEFINE_bool("compress_gradients", False, "All-reduce the "
                                        "gradients in float16 (tfdist.compress_gradients).")
_PLOT = flags.DEFINE_string("plot", "scaling.png", "Where the PNG goes ('' for none).")
_OUTPUT = flags.DEFINE_string("output", None, "Write the numbers as JSON here.")
_WORKER_RESULT = flags.DEFINE_string("worker_result", None, "Internal: worker 0 writes here.")

REPLICAS = (1, 2, 4, 8, 16, 32, 64)


def main(argv):
  del argv
  if os.environ.get("TF_CONFIG"):
    return _worker()
  from tfdist import scaling_analysis
  # Alternated, because on a shared VM a process's step time can sit on a
  # level 2x off for its whole life (FACTS.md); one pair can be a fluke.
  pairs = []
  for _ in range(_PAIRS.value):
    one, two = _measure(workers=1), _measure(workers=2)
    if one is None or two is None:
      return 1
    pairs.append((one, two))
  twos = [two for _, two in pairs]
  gradient_bytes = pairs[0][0]["gradient_bytes"]
  compute = statistics.median(one["synced"] for one, _ in pairs)
  # What sharing this machine costs each worker's compute, from the plain copy.
  slowdown = statistics.median(two["plain"] / one["plain"] for one, two in pairs)
  colocated = compute * slowdown
  busbw = statistics.median(two["busbw"] for two in twos)
  bytes_seconds = scaling_analysis.communication_seconds(gradient_bytes, busbw, 2)
  communication = statistics.median(two["synced_tiny"] - two["plain_tiny"] for two in twos)
  latency = max(0.0, communication - bytes_seconds)
  two_step = statistics.median(two["synced"] for two in twos)
  predictions = scaling_analysis.predict(compute, gradient_bytes, busbw, REPLICAS, latency)
  # Here the 2 workers share one machine: the same model, co-located compute.
  here = scaling_analysis.predict(colocated, gradient_bytes, busbw, [2], latency)[0]
  predicted = compute / here.step_seconds
  efficiencies = [one["synced"] / two["synced"] for one, two in pairs]
  measured = statistics.median(efficiencies)
  error = abs(predicted - measured) / measured
  fp16 = " (float16 on the wire, counted in float32 bytes)" if _COMPRESS_GRADIENTS.value else ""
  print(f"\nmodel {_MODEL.value}, batch {_BATCH_SIZE.value} per replica; medians of "
        f"{len(pairs)} alternated 1- and 2-worker runs:\n"
        f"  compute         {1000 * compute:8.1f} ms per step on 1 worker\n"
        f"  co-located      {1000 * colocated:8.1f} ms per step, 2 workers computing at once on "
        f"this machine ({slowdown - 1:+.0%} for a plain copy of the model: shared caches and memory)\n"
        f"  gradients       {gradient_bytes / 2**20:8.2f} MB; all-reduce bus bandwidth "
        f"{busbw / 1e9:.3f} GB/s{fp16}: {1000 * bytes_seconds:.1f} ms per step on 2 workers\n"
        f"  latency         {1000 * latency:8.1f} ms per step on 2 workers (communication at "
        f"batch 1, {1000 * communication:.1f} ms, less the bytes)")
  print(f"\npredicted on separate machines (α-β model):\n"
        f"{'replicas':>8} {'step ms':>8} {'efficiency':>11}")
  for p in predictions:
    print(f"{p.replicas:>8} {1000 * p.step_seconds:>8.1f} {p.efficiency:>10.0%}")
  print(f"\n2 workers on this machine: predicted {predicted:.0%}, measured {measured:.0%} "
        f"({1000 * two_step:.1f} ms per step; pairs: "
        f"{', '.join(f'{e:.0%}' for e in efficiencies)}); prediction off by {error:.0%}")
  print("\n" + scaling_analysis.advice(compute, gradient_bytes, busbw, measured,
                                              compressed=_COMPRESS_GRADIENTS.value,
                                              latency_seconds=latency))
  if _PLOT.value:
    try:
      path = scaling_analysis.plot(
          _PLOT.value, predictions,
          [scaling_analysis.Prediction(1, compute, 1.0),
           scaling_analysis.Prediction(2, two_step, measured)],
          title=f"{_MODEL.value}: {gradient_bytes / 2**20:.2f} MB gradients")
      print(f"curve: {path}")
    except ImportError as e:
      print(f"no curve: {e}")
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump({"compute_seconds": compute, "colocated_seconds": colocated,
                 "two_worker_seconds": two_step, "batch_size": _BATCH_SIZE.value,
                 "latency_seconds": latency, "gradient_bytes": gradient_bytes, "busbw": busbw,
                 "measured_efficiency_2": measured,
                 "measured_efficiency_2_per_pair": efficiencies,
                 "predicted_efficiency_2": predicted,
                 "prediction_error_2": error,
                 "predicted": {p.replicas: p.efficiency for p in predictions}}, f, indent=1)
  return 0


def _measure(workers: int):
  from tfdist import cluster as cluster_lib
  from tfdist import launch
  with tempfile.TemporaryDirectory() as workdir:
    path = os.path.join(workdir, "result.json")
    command = [sys.executable, "-m", "tfdist", "scale", f"--model={_MODEL.value}",
               f"--batch_size={_BATCH_SIZE.value}", f"--steps={_STEPS.value}",
               f"--repeats={_REPEATS.value}", f"--compress_gradients={_COMPRESS_GRADIENTS.value}",
               f"--worker_result={path}"]
    print(f"measuring on {workers} worker(s)...", flush=True)
    code = launch.launch_local(command, cluster_lib.ClusterSpec.local(workers=workers),
                               timeout=900, output=open(os.devnull, "w"))
    if code != 0 or not os.path.exists(path):
      print(f"tfdist scale: the {workers}-worker run failed (exit code {code}); run "
            f"`tfdist launch --workers {workers} -- {' '.join(command[:-1])}` to see why.",
            file=sys.stderr)
      return None
    with open(path) as f:
      return json.load(f)


def _model_fn():
  if _MODEL.value in ("cnn", "convnet", "mlp"):
    from tfdist import bench
    return bench.MODELS[_MODEL.value][0]
  from tfdist import user_code
  return user_code.function(user_code.load_module(_MODEL.value, "model"), "model_fn", "model")


def _worker() -> int:
  import tfdist
  from tfdist import cluster as cluster_lib
  spec = cluster_lib.ClusterSpec.from_env()
  # One core per worker, so that 2 workers have twice the compute of 1. Every
  # thread: affinity is per thread on Linux, and threads started by earlier
  # imports would otherwise roam.
  core = {spec.task.index % os.cpu_count()}
  for thread in os.listdir("/proc/self/task"):
    try:
      os.sched_setaffinity(int(thread), core)
    except ProcessLookupError:  # The thread has ended.
      pass
  strategy = tfdist.make_strategy("multi_worker_mirrored", communication="ring")
  import numpy as np
  import tensorflow as tf
  from tfdist import bench
  from tfdist import gradient_compression
  from tfdist import keras
  from tfdist import keras_support
  from tfdist import strategies
  rng = np.random.default_rng(spec.task.index)
  model_fn = _model_fn()

  def compiled(distributed: bool):
    model = model_fn()
    if model.optimizer is None:
      model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    if distributed:
      if _COMPRESS_GRADIENTS.value:
        gradient_compression.compress_gradients(model.optimizer)
      keras_support.set_distribute_reduction_method(model, strategy)
    return model

  def fit_timer(model, batch: int, distributed: bool):
    """A function timing one fit of the model on random data of its shapes: seconds/step."""
    x = rng.random((batch * 8,) + tuple(model.input_shape[1:])).astype("float32")
    y = rng.random((batch * 8,) + tuple(model.output_shape[1:])).astype("float32")
    make = lambda context=None: tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat()
    dataset = strategy.distribute_datasets_from_function(make) if distributed else make()
    clock = bench.EpochClock()

    def timed_fit() -> float:
      model.fit(dataset, epochs=1, steps_per_epoch=_STEPS.value, verbose=0, callbacks=[clock])
      return clock.seconds["wall"] / _STEPS.value
    return timed_fit

  with strategy.scope():
    model = compiled(distributed=True)
  # The same model with no strategy: the same compute, nothing to synchronise.
  # Alone (1 worker) against 2 at once, it shows what sharing the machine costs.
  plain = compiled(distributed=False)
  timers = {"synced": fit_timer(model, _BATCH_SIZE.value, distributed=True),
            "plain": fit_timer(plain, _BATCH_SIZE.value, distributed=False)}
  if spec.num_workers > 1:
    timers["synced_tiny"] = fit_timer(model, 1, distributed=True)
    timers["plain_tiny"] = fit_timer(plain, 1, distributed=False)

  @tf.function
  def barrier():
    # Every worker starts each timed fit together, the unsynchronised ones too.
    one = lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.identity(1.0))
    return strategy.run(one)

  seconds = {name: [] for name in timers}
  for _ in range(_REPEATS.value + 1):  # The first round traces and warms up.
    for name, timed_fit in timers.items():
      barrier()
      seconds[name].append(timed_fit())
  result = {name: statistics.median(times[1:]) for name, times in seconds.items()}
  result["gradient_bytes"] = sum(int(np.prod(v.shape)) * v.dtype.size
                                 for v in model.trainable_variables)
  if spec.num_workers > 1:
    # Bandwidth where latency no longer counts: at least 16 MB, in the
    # model's packs, float16 on the wire if the model compresses.
    size = max(result["gradient_bytes"], 16 * bench.MB)
    variant = bench.AllReduceVariant("model", strategies.BYTES_PER_PACK,
                                     "float16" if _COMPRESS_GRADIENTS.value else "float32")
    all_reduce = bench.all_reduce_seconds(strategy, bench.gradient_sizes(size), [variant],
                                          repeats=max(5, _REPEATS.value))["model"]
    result["busbw"] = bench.bus_bandwidth(size, all_reduce, spec.num_workers)["busbw"]
  if spec.task.index == 0 and _WORKER_RESULT.value:
    with open(_WORKER_RESULT.value, "w") as f:
      json.dump(result, f)
  return 0
