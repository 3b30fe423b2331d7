"""What the exit of a TensorFlow process costs, with the interpreter's last collection and
without it (the suite's tests/site/sitecustomize.py: `gc.freeze()` at exit).

    python benchmarks/process_exit.py [--repeats=5] [--output=FILE]

Runs the same small job as its own process, alternating: Python's normal exit, and the
same with tests/site on PYTHONPATH. The job imports TensorFlow and Keras 3 and fits a
one-layer model for one epoch, then prints the CPU it has used. The CPU the process used
after that line is its exit. Prints the median CPU of the exit and of the whole process
each way, with their ranges (the noise), and the ratio of the wholes.
"""

import json
import os
import resource
import statistics
import subprocess
import sys

from absl import app
from absl import flags

_REPEATS = flags.DEFINE_integer("repeats", 5, "Processes each way, alternated.", lower_bound=1)
_OUTPUT = flags.DEFINE_string("output", None, "Write the results as JSON here.")

_SITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "site")
_JOB = """
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import keras
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(np.ones((64, 4), "float32"), np.ones((64, 1), "float32"), batch_size=16, verbose=0)
times = os.times()
print("CPU", times.user + times.system, flush=True)
"""


def _run(frozen: bool) -> tuple:
  """(the CPU of the exit, of the whole process) of one run of the job."""
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  if frozen:
    env["PYTHONPATH"] = _SITE
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  done = subprocess.run([sys.executable, "-c", _JOB], env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL, text=True, timeout=300, check=True)
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  whole = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
  at_end = float(done.stdout.split("CPU", 1)[1])
  return whole - at_end, whole


def main(argv):
  del argv
  runs = {"normal exit": [], "no last collection": []}
  for i in range(_REPEATS.value):
    for way in runs:
      runs[way].append(_run(way == "no last collection"))
    print(f"round {i + 1} of {_REPEATS.value} done", flush=True)
  result = {}
  for way, rows in runs.items():
    exits, wholes = [r[0] for r in rows], [r[1] for r in rows]
    result[way] = {"exit": exits, "whole": wholes}
    print(f"{way:<20} exit {statistics.median(exits):.2f} s CPU ({min(exits):.2f}-"
          f"{max(exits):.2f}), whole process {statistics.median(wholes):.2f} s "
          f"({min(wholes):.2f}-{max(wholes):.2f})")
  ratio = (statistics.median(result["no last collection"]["whole"]) /
           statistics.median(result["normal exit"]["whole"]))
  print(f"a process without the last collection costs {ratio:.2f}x the CPU of one with it")
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as out:
      json.dump(result, out, indent=1)


if __name__ == "__main__":
  app.run(main)
