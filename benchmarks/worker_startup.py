"""What importing Keras 3 costs a worker that trains with tf_keras: CPU from start to trained.

    python benchmarks/worker_startup.py [--repeats=5] [--output=FILE]

Launches a 2-worker multi_worker_mirrored job with `tfdist launch` (tf_keras, the
launcher's default), alternating runs in which each worker imports Keras 3 right after
`make_strategy` (what tfdist did to patch Keras 3 before 2026-11-29) and runs in which
it does not (what tfdist does now: Keras 3 is patched when it is imported). Each worker
fits a one-layer model for 4 steps and reports the CPU its process used, start to end.
Prints the median CPU seconds per worker of each and their ratio, with the range of
the runs: the noise. CPU time is the steady measure on a shared machine
(docs/measuring.md).
"""

import json
import os
import re
import statistics
import subprocess
import sys

from absl import app
from absl import flags

_REPEATS = flags.DEFINE_integer("repeats", 5, "Runs of each, alternated.", lower_bound=1)
_OUTPUT = flags.DEFINE_string("output", None, "Write the results as JSON here.")
_JOB = flags.DEFINE_enum("job", None, ["plain", "keras3"],
                         "Internal: run as one worker of the job.")


def job(kind: str) -> None:
  import numpy as np
  import tfdist
  strategy = tfdist.make_strategy("multi_worker_mirrored")
  if kind == "keras3":
    import keras  # pylint: disable=unused-import
  keras = tfdist.keras
  with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
  model.fit(np.ones((64, 4), "float32"), np.ones((64, 1), "float32"), batch_size=16,
            epochs=1, verbose=0)
  times = os.times()
  print("RESULT " + json.dumps({"cpu": times.user + times.system,
                                "keras3": "keras.src" in sys.modules}), flush=True)


def run(kind: str) -> list:
  command = [sys.executable, "-m", "tfdist", "launch", "--workers=2", "--timeout=300", "--",
             sys.executable, os.path.abspath(__file__), f"--job={kind}"]
  done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        timeout=600, check=False)
  found = [json.loads(line) for line in re.findall(r"RESULT (.*)", done.stdout)]
  if done.returncode or len(found) != 2:
    raise RuntimeError(f"the {kind} job failed:\n{done.stdout[-3000:]}")
  if any(r["keras3"] != (kind == "keras3") for r in found):
    raise RuntimeError(f"the {kind} job imported Keras 3 {'not ' * (kind == 'keras3')}as "
                       f"expected: {found}")
  return [r["cpu"] for r in found]


def main(argv):
  del argv
  if _JOB.value:
    job(_JOB.value)
    return
  cpu = {"keras3": [], "plain": []}
  for _ in range(_REPEATS.value):
    for kind in cpu:
      cpu[kind] += run(kind)
  median = {kind: statistics.median(values) for kind, values in cpu.items()}
  print(f"{'worker':<40} {'CPU s (median)':>14} {'range':>13}")
  for kind, label in (("keras3", "imports Keras 3 (tfdist before)"),
                      ("plain", "does not (tfdist now)")):
    print(f"{label:<40} {median[kind]:>14.2f} {min(cpu[kind]):>6.2f}-{max(cpu[kind]):<6.2f}")
  print(f"ratio now/before: {median['plain'] / median['keras3']:.2f}x "
        f"({median['keras3'] - median['plain']:.2f} s of CPU less per worker)")
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump({"cpu_seconds": cpu, "median": median}, f, indent=1)


if __name__ == "__main__":
  app.run(main)
