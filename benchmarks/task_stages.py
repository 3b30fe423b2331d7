"""Where one task of a 2-worker job spends its CPU, stage by stage: a profile, not a benchmark.

    python -m tfdist launch --workers=2 -- python benchmarks/task_stages.py {keras3,tf_keras} DIR

Each task prints one STAGES line: for each stage, the CPU its process had used by then
and the wall time since it started (`resource.getrusage`). The stages: numpy, TensorFlow,
tfdist, `make_strategy("multi_worker_mirrored")`, the Keras (Keras 3 is imported here;
tf_keras came with TensorFlow), a one-layer model, a first `fit` of one epoch over 600
examples with tfdist's BackupAndRestore in DIR, and two more epochs. The job of
`tests/scripts/fit_resume.py`, the suite's heaviest kind of test: what a test's CPU is made
of (docs/suite-time-runs.md, "Why packing alone cannot reach 25 minutes").
"""

import json
import resource
import sys
import time

_START = time.monotonic()
_MARKS = []


def _mark(stage: str) -> None:
  used = resource.getrusage(resource.RUSAGE_SELF)
  _MARKS.append({"stage": stage, "cpu_s": round(used.ru_utime + used.ru_stime, 2),
                 "wall_s": round(time.monotonic() - _START, 2)})


import numpy as np  # pylint: disable=wrong-import-position
_mark("numpy")
import tensorflow as tf  # pylint: disable=wrong-import-position
_mark("tensorflow")
import tfdist  # pylint: disable=wrong-import-position
from tfdist.training import checkpoints  # pylint: disable=wrong-import-position
_mark("tfdist")

flavour, backup_dir = sys.argv[1:3]
strategy = tfdist.make_strategy("multi_worker_mirrored")
_mark("make_strategy")
if flavour == "keras3":
  import keras  # pylint: disable=g-import-not-at-top
else:
  keras = tfdist.keras
_mark("keras")

rng = np.random.default_rng(0)
x = rng.random((600, 4)).astype("float32")
keras.utils.set_random_seed(0)
with strategy.scope():
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
  model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
_mark("model")
data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).shuffle(600, seed=7).batch(64)
model.fit(data, epochs=1, verbose=0,
          callbacks=[checkpoints.backup_and_restore(backup_dir, check_every=1, model=model)])
_mark("first fit, 1 epoch")
model.fit(data, epochs=2, verbose=0)
_mark("2 more epochs")
print("STAGES " + json.dumps(_MARKS), flush=True)
