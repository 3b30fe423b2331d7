"""`tfdist scale`: how well will this model scale, predicted and checked here.

Measures, with each worker pinned to its own core:
  1. the step time of the model on 1 worker (its compute),
  2. the bus bandwidth of an all-reduce of its gradients between 2 workers,
  3. the step time on 2 workers (same per-replica batch),
alternating 1- and 2-worker runs --pairs times and taking medians.
Then predicts the efficiency at 2, 4, 8 ... replicas with the α-β model
(tfdist/scaling_analysis.py), compares the prediction for 2 with the
measurement, draws the curve to a PNG and says what to do.

--compress_gradients measures and predicts with float16 all-reduces.

--model is `cnn` (the default job's), `mlp` (784-512-512-10), or your .py file
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

_MODEL = flags.DEFINE_string("model", "cnn", "cnn, mlp, or a .py file / module with model_fn().")
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
  compute = statistics.median(one["step_seconds"] for one, _ in pairs)
  gradient_bytes = pairs[0][0]["gradient_bytes"]
  busbw = statistics.median(two["busbw"] for _, two in pairs)
  two_step = statistics.median(two["step_seconds"] for _, two in pairs)
  predictions = scaling_analysis.predict(compute, gradient_bytes, busbw, REPLICAS)
  efficiencies = [one["step_seconds"] / two["step_seconds"] for one, two in pairs]
  measured = statistics.median(efficiencies)
  predicted = predictions[1].efficiency
  error = abs(predicted - measured) / measured
  print(f"\nmodel {_MODEL.value}: {gradient_bytes / 2**20:.2f} MB of gradients, "
        f"{1000 * compute:.1f} ms per step on 1 worker (batch {_BATCH_SIZE.value}), "
        f"all-reduce bus bandwidth {busbw / 1e9:.3f} GB/s at that size between 2 workers; "
        f"medians of {len(pairs)} alternated 1- and 2-worker runs"
        + (" (float16 on the wire, counted in float32 bytes)" if _COMPRESS_GRADIENTS.value else ""))
  print(f"{'replicas':>8} {'step ms':>8} {'efficiency':>11}")
  for p in predictions:
    note = f"   measured {measured:.0%}, prediction off by {error:.0%}" if p.replicas == 2 else ""
    print(f"{p.replicas:>8} {1000 * p.step_seconds:>8.1f} {p.efficiency:>10.0%}{note}")
  print("\n" + scaling_analysis.advice(compute, gradient_bytes, busbw, measured,
                                              compressed=_COMPRESS_GRADIENTS.value))
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
      json.dump({"compute_seconds": compute, "gradient_bytes": gradient_bytes, "busbw": busbw,
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
  if _MODEL.value == "cnn":
    from tfdist import training
    return training.small_cnn
  if _MODEL.value == "mlp":
    from tfdist import bench
    return bench.mlp
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
  from tfdist import strategies
  rng = np.random.default_rng(spec.task.index)
  batch = _BATCH_SIZE.value

  def step_seconds(model_fn):
    """Median seconds per fit step of the model on random data of its shapes."""
    with strategy.scope():
      model = model_fn()
      if model.optimizer is None:
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
      if _COMPRESS_GRADIENTS.value:
        gradient_compression.compress_gradients(model.optimizer)
    x = rng.random((batch * 8,) + tuple(model.input_shape[1:])).astype("float32")
    y = rng.random((batch * 8,) + tuple(model.output_shape[1:])).astype("float32")
    dataset = strategy.distribute_datasets_from_function(
        lambda context: tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat())

    clock = bench.EpochClock()

    def timed_fit() -> float:
      model.fit(dataset, epochs=1, steps_per_epoch=_STEPS.value, verbose=0, callbacks=[clock])
      return clock.seconds["wall"] / _STEPS.value

    timed_fit()  # Tracing.
    return model, statistics.median(timed_fit() for _ in range(_REPEATS.value))

  model, step = step_seconds(_model_fn())
  gradient_bytes = sum(int(np.prod(v.shape)) * v.dtype.size for v in model.trainable_variables)
  busbw = None
  if spec.num_workers > 1:  # At the gradients' size, latency included.
    # The model's own gradient tensors, sent as its training step sends them.
    variant = bench.AllReduceVariant("model", strategies.BYTES_PER_PACK,
                                     "float16" if _COMPRESS_GRADIENTS.value else "float32")
    seconds = bench.all_reduce_seconds(
        strategy, [int(np.prod(v.shape)) * v.dtype.size for v in model.trainable_variables],
        [variant], repeats=max(10, _REPEATS.value))["model"]
    busbw = bench.bus_bandwidth(gradient_bytes, seconds, spec.num_workers)["busbw"]
  if spec.task.index == 0 and _WORKER_RESULT.value:
    with open(_WORKER_RESULT.value, "w") as f:
      json.dump({"step_seconds": step, "gradient_bytes": gradient_bytes, "busbw": busbw}, f)
  return 0
