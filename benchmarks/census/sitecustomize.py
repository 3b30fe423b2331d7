"""A census of Python processes, for measuring the suite: one JSON line per process at exit.

Not part of tfdist. Put this folder on PYTHONPATH and name the log in CENSUS_LOG for a
run, e.g. a rehearsal of CI:

    log=$(mktemp -d)/census.jsonl
    PYTHONPATH=$PWD/benchmarks/census CENSUS_LOG=$log CI=true bash .ci/run
    python benchmarks/census_summary.py $log

Without CENSUS_LOG nothing is written. The log is created readable by its owner only
(argv can hold paths and names), and a symlink in its place is refused, not followed.

Each line: the process's argv, interpreter, the test it ran for (PYTEST_CURRENT_TEST,
which a test's children inherit), whether it imported TensorFlow, Keras 3, tf_keras and
Matplotlib's pyplot, and its CPU and wall seconds. A process killed by a signal writes
nothing, so fault-injection tests are undercounted. `tfdist launch`'s task site hands
over to this file (tfdist/task/site/sitecustomize.py), so tasks are counted too.
"""

import atexit
import json
import os
import sys
import time

_START = time.time()


def _write():
  if not os.environ.get("CENSUS_LOG"):
    return
  try:
    times, modules = os.times(), sys.modules
    line = {"pid": os.getpid(), "argv": sys.argv[:4], "exe": sys.executable,
            "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
            "tf": "tensorflow" in modules, "k3": "keras.src" in modules,
            "tfk": "tf_keras" in modules, "mpl": "matplotlib.pyplot" in modules,
            "cpu": round(times.user + times.system, 2), "wall": round(time.time() - _START, 2)}
    fd = os.open(os.environ["CENSUS_LOG"],
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "a") as f:
      f.write(json.dumps(line) + "\n")
  except Exception:  # pylint: disable=broad-except  Never fail the process it counts.
    pass


atexit.register(_write)
