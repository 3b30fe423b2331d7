"""Does the gradients' all-reduce overlap the backward pass? Read from the TF profiler.

    tfdist launch --workers 2 -- python benchmarks/overlap.py --bytes_per_pack=65536

Each worker trains the compute-bound convnet (tfdist._lab.models) under
MultiWorkerMirroredStrategy with tfdist's one-all-reduce step, warms up,
then profiles `--steps` steps with `tf.profiler.experimental`. Worker 0 reads
its own trace (TF's trace viewer data) and prints, per step: how long the
backward pass ran (its Conv2D backprops, ReluGrad and BiasAddGrad ops), how
many collectives the step launched, how many of them started before the last
backward op ended, and when the first started relative to that end (negative:
it overlapped). With `--output` it writes the same as JSON.

What it found here (docs/benchmarks/scaling.md, "Benchmark and scaling numbers"): with one pack
the all-reduce starts after the backward pass; with small packs TF launches
the first pack (the last layers' gradients: TF reverses the list for that)
before the backward pass ends, and the rest in order after it.
"""

import glob
import json
import os
import sys
import tempfile

from absl import app
from absl import flags

_BYTES_PER_PACK = flags.DEFINE_integer("bytes_per_pack", 65536, "Gradient pack size; 0 is "
                                       "TF's single pack.", lower_bound=0)
_STEPS = flags.DEFINE_integer("steps", 3, "Steps profiled.", lower_bound=1)
_BATCH = flags.DEFINE_integer("batch_size", 32, "Global batch.", lower_bound=2)
_OUTPUT = flags.DEFINE_string("output", None, "Write the per-step rows here (JSON).")

_BACKWARD = ("Backprop", "ReluGrad", "BiasAddGrad")
# A forward convolution on CPUs: oneDNN's, where TensorFlow turns oneDNN on (x86 CPUs with
# AVX-512), else Eigen's, fused with its bias and activation by Grappler or not. An AMD VM
# without AVX-512 traced no oneDNN op, and every step was missed.
_FORWARD_CONVS = ("_MklNativeFusedConv2D", "_FusedConv2D", "Conv2D")


def _events(logdir):
  # TF's own converter from the profile (XSpace) to the trace viewer's JSON.
  from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as plugin  # pylint: disable=g-import-not-at-top
  (path,) = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
  data, ok = plugin.xspace_to_tools_data([path], "trace_viewer@", {})
  if not ok:
    raise RuntimeError(f"TF could not read its profile {path}. Received: {data[:200]!r}")
  return [e for e in json.loads(data)["traceEvents"] if e.get("ph") == "X"]


def steps_of(events, convs_per_step: int):
  """Per step: backward time, collectives, and how they sit against the backward pass."""
  forward = sorted(e["ts"] for e in events if e["name"] in _FORWARD_CONVS)
  starts = forward[::convs_per_step]
  rows = []
  for i, start in enumerate(starts):
    end = starts[i + 1] if i + 1 < len(starts) else float("inf")
    inside = [e for e in events if start <= e["ts"] < end]
    backward = [e for e in inside if any(b in e["name"] for b in _BACKWARD)]
    collectives = sorted((e for e in inside if e["name"] == "CollectiveReduceV2"),
                         key=lambda e: e["ts"])
    if not backward or not collectives:
      continue
    backward_end = max(e["ts"] + e["dur"] for e in backward)
    rows.append({
        "backward_ms": (backward_end - min(e["ts"] for e in backward)) / 1000,
        "collectives": len(collectives),
        "started_before_backward_ended": sum(e["ts"] < backward_end for e in collectives),
        "first_collective_after_backward_ms": (collectives[0]["ts"] - backward_end) / 1000,
    })
  return rows


def main(argv):
  del argv
  import tfdist  # pylint: disable=g-import-not-at-top
  strategy = tfdist.make_strategy("multi_worker_mirrored",
                                  bytes_per_pack=_BYTES_PER_PACK.value)
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfdist import keras  # pylint: disable=g-import-not-at-top
  from tfdist.training import fit_step
  from tfdist._lab import models  # pylint: disable=g-import-not-at-top
  with strategy.scope():
    model = models.convnet()
    model.compile(keras.optimizers.SGD(0.01), "mse")
  fit_step.synchronise_once(model, strategy)
  rng = np.random.default_rng(0)
  batch = _BATCH.value
  x = rng.random((batch,) + tuple(model.input_shape[1:])).astype("float32")
  y = rng.random((batch,) + tuple(model.output_shape[1:])).astype("float32")
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat()
  model.fit(dataset, steps_per_epoch=3, epochs=1, verbose=0)  # Traced and warm.
  with tempfile.TemporaryDirectory() as logdir:
    tf.profiler.experimental.start(logdir)
    model.fit(dataset, steps_per_epoch=_STEPS.value, epochs=1, verbose=0)
    tf.profiler.experimental.stop()
    if strategy.cluster_resolver.task_id == 0:
      convs = sum(isinstance(layer, keras.layers.Conv2D) for layer in model.layers)
      rows = steps_of(_events(logdir), convs)
  # Both workers end together: a worker that exits while worker 0 still reads
  # its trace is a lost peer to TF's coordination service, which then aborts
  # worker 0 (exit code 134, seen in CI).
  strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)
  if strategy.cluster_resolver.task_id != 0:
    return 0
  print(f"bytes_per_pack={_BYTES_PER_PACK.value}: per profiled step")
  for row in rows:
    print("  " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                           for k, v in row.items()))
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump({"bytes_per_pack": _BYTES_PER_PACK.value, "steps": rows}, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(app.run(main))
