"""The batching window without HTTP: client threads calling the batched model in one process.

    python benchmarks/serving_in_process.py --clients=16 --rounds=3

The batching server's HTTP and JSON handling costs more than the default
CNN (docs/benchmarks/serving.md, "Serving with request batching"), so there a longer
window cannot raise requests/s. Here the same batched function the server
builds, `tfdist.serving.batched` (TensorFlow's `BatchFunction` op around the
SavedModel's `serving_default`), is called directly by `--clients` threads, one row per
call, each sending its next call when the last returns (closed loop), for
`max_batch_size` 8 and windows of 0, 2 and 5 ms, interleaved round by round,
for the default job's CNN, a wide MLP (64-2048-2048-10) and a trivial model
that returns its input. First it times one unbatched call of batch 1 and of
batch 8 of each model. Prints rows/s, p50 latency and the mean rows of the
batches per cell and round; `--output` also writes them as JSON.
"""
import json
import os
import tempfile
import threading
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import tfdist
from tfdist import serving
from tfdist.training import job

_CLIENTS = flags.DEFINE_integer("clients", 16, "Concurrent client threads.")
_CALLS = flags.DEFINE_integer("calls", 60, "Calls per client per cell.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Interleaved rounds over every cell.")
_MAX_BATCH_SIZE = flags.DEFINE_integer("max_batch_size", 8, "The batching op's max_batch_size.")
_WINDOWS = flags.DEFINE_list("windows_micros", ["0", "2000", "5000"], "batch_timeout_micros.")
_BATCH_THREADS = flags.DEFINE_integer("num_batch_threads", 1, "The batching op's threads.")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the results here, as JSON.")


def _models(folder: str) -> dict:
  import keras  # pylint: disable=import-outside-toplevel
  keras.utils.set_random_seed(0)
  wide = keras.Sequential([keras.Input((64,)), keras.layers.Dense(2048, activation="relu"),
                           keras.layers.Dense(2048, activation="relu"), keras.layers.Dense(10)])
  cnn = tfdist.export(job.small_cnn(), os.path.join(folder, "cnn"))
  return {"cnn": cnn, "wide_mlp": tfdist.export(wide, os.path.join(folder, "wide_mlp")),
          "trivial": serving.write_trivial_model(os.path.join(folder, "trivial", "1"), like=cnn)}


def _call_ms(signature, rows: tf.Tensor, calls: int = 100) -> float:
  """Median ms of one unbatched call of `rows`, over 3 timings of `calls` calls."""
  (name,) = signature.structured_input_signature[1]
  times = []
  for _ in range(3):
    start = time.perf_counter()
    for _ in range(calls):
      signature(**{name: rows})
    times.append(1000 * (time.perf_counter() - start) / calls)
  return float(np.median(times))


def _drive(fn, row: tf.Tensor, clients: int, calls: int) -> dict:
  """`clients` threads each calling `fn(row)` `calls` times in a row: rows/s, p50, batch rows."""
  latencies, batches, lock = [], [], threading.Lock()
  start = threading.Barrier(clients + 1)

  def client():
    mine, sizes = [], []
    start.wait()
    for _ in range(calls):
      began = time.perf_counter()
      _, batch_rows = fn(row)
      mine.append(time.perf_counter() - began)
      sizes.append(int(batch_rows[0]))
    with lock:
      latencies.extend(mine)
      batches.extend(sizes)

  threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
  for thread in threads:
    thread.start()
  start.wait()
  began = time.perf_counter()
  for thread in threads:
    thread.join(300)
  seconds = time.perf_counter() - began
  return {"rows_per_second": len(latencies) / seconds,
          "p50_ms": 1000 * float(np.median(latencies)),
          "mean_batch_rows": float(np.mean(batches))}


def main(argv):
  del argv
  rng = np.random.default_rng(0)
  results = {"clients": _CLIENTS.value, "max_batch_size": _MAX_BATCH_SIZE.value,
             "num_batch_threads": _BATCH_THREADS.value, "call_ms": {}, "cells": []}
  with tempfile.TemporaryDirectory(prefix="serving-in-process-") as folder:
    functions, rows = {}, {}
    for model, path in _models(folder).items():
      saved_model = tf.saved_model.load(path)
      signature = saved_model.signatures["serving_default"]
      (spec,) = signature.structured_input_signature[1].values()
      shape = [int(d) for d in spec.shape[1:]]
      rows[model] = tf.constant(rng.random([1] + shape), tf.float32)
      eight = tf.constant(rng.random([8] + shape), tf.float32)
      signature(**{next(iter(signature.structured_input_signature[1])): eight})  # Traces.
      results["call_ms"][model] = {"1": _call_ms(signature, rows[model]),
                                   "8": _call_ms(signature, eight)}
      print(f"{model:9s} one unbatched call: batch 1 {results['call_ms'][model]['1']:.3f} ms, "
            f"batch 8 {results['call_ms'][model]['8']:.3f} ms", flush=True)
      for window in (int(w) for w in _WINDOWS.value):
        fn = serving.batched(saved_model, serving.Batching(
            _MAX_BATCH_SIZE.value, window, num_batch_threads=_BATCH_THREADS.value))
        fn(rows[model])  # Traced before the measured calls.
        functions[(model, window)] = fn
    print(f"\n{_CLIENTS.value} client threads, one row per call, max_batch_size "
          f"{_MAX_BATCH_SIZE.value}, {_BATCH_THREADS.value} batch thread(s)")
    print(f"{'round':>5} {'model':>9} {'window us':>9} {'rows/s':>7} {'p50 ms':>7} {'batch':>6}")
    for round_ in range(_ROUNDS.value):  # Interleaved: the machine's noise hits every cell alike.
      for (model, window), fn in functions.items():
        cell = _drive(fn, rows[model], _CLIENTS.value, _CALLS.value)
        results["cells"].append({"round": round_, "model": model, "window_micros": window, **cell})
        print(f"{round_:>5} {model:>9} {window:>9} {cell['rows_per_second']:>7.0f} "
              f"{cell['p50_ms']:>7.2f} {cell['mean_batch_rows']:>6.1f}", flush=True)
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump(results, f, indent=1)


if __name__ == "__main__":
  app.run(main)
