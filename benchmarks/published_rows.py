"""What a row of step times costs where pods share no folder: an epoch's end with and without.

    python benchmarks/published_rows.py [--calls=300]

Where the tasks share no folder (`tfdist task` in Kubernetes pods), each
task hands its row of step times, once a second and at each epoch's end, to
a thread of its own that publishes it in TensorFlow's coordination service (a
delete and an insert on the service's leader), and the chief reads every
other task's row at each epoch's end (`tfdist.task.progress`,
`TFDIST_STEPS_PUBLISHED`). This starts a 2-worker MultiWorkerMirroredStrategy
on loopback, in a private network namespace, as two processes, twice: with the
rows published, and without (each task's row only in its own progress
directory). In each, worker 1 calls `tfdist.task.progress.epoch_end()` `--calls`
times (its row written, and handed to the publisher), then worker 0, the
chief, does (its row written, and worker 1's read). Prints the median and p95
wall milliseconds of a call, with and without, the share of a second that
one hand-over adds to the training thread, and the same as JSON.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

_CALLS = flags.DEFINE_integer("calls", 300, "Epoch ends timed on each task.", lower_bound=10)
_TASK = flags.DEFINE_integer("task", None, "Internal: run as this worker of the job.")


def _task(index: int, calls: int) -> None:
  import tensorflow as tf
  from tfdist.task import progress

  assert progress.install_from_env()
  strategy = tf.distribute.MultiWorkerMirroredStrategy()
  seconds = []

  def epoch_ends():
    for _ in range(calls):
      start = time.perf_counter()
      progress.epoch_end()
      seconds.append(time.perf_counter() - start)

  if index == 1:
    epoch_ends()
  with strategy.scope():  # A collective: worker 1 has published before the chief reads.
    tf.Variable(0.0)
  if index == 0:
    epoch_ends()
  print(json.dumps(seconds), flush=True)
  with strategy.scope():  # Worker 0, the service's leader, outlives the reads.
    tf.Variable(0.0)


def _job(calls: int, published: bool):
  """(worker 1's, worker 0's) seconds per epoch end, in a job of two processes."""
  import tfdist
  from tfdist.task import progress
  from tfdist.launch import private_network
  spec = tfdist.ClusterSpec.local(2)
  processes = []
  # TF's servers listen on every interface: the workers run in a loopback-only network.
  with tempfile.TemporaryDirectory() as directory, \
      private_network.enter("loopback", spec, lambda message: None) as prefix:
    for index in range(2):
      env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_CONFIG=spec.tf_config("worker", index))
      env[progress.PROGRESS_DIR_ENV] = os.path.join(directory, str(index))
      os.mkdir(env[progress.PROGRESS_DIR_ENV])
      if published:
        env[progress.STEPS_PUBLISHED_ENV] = "1"
      processes.append(subprocess.Popen(
          [*prefix, sys.executable, __file__, f"--task={index}", f"--calls={calls}"], env=env,
          stdout=subprocess.PIPE, text=True))
    try:
      outputs = [p.communicate(timeout=300)[0] for p in processes]
    finally:
      for p in processes:
        p.kill()
  codes = [p.returncode for p in processes]
  if any(codes):
    raise SystemExit(f"a worker failed. Received: exit codes {codes}")
  chief, worker = (json.loads(out.strip().splitlines()[-1]) for out in outputs)
  return worker, chief


def _median_p95_ms(seconds):
  ordered = sorted(seconds)
  return 1000 * statistics.median(ordered), 1000 * ordered[int(0.95 * len(ordered)) - 1]


def main(argv):
  del argv
  if _TASK.value is not None:
    _task(_TASK.value, _CALLS.value)
    return
  runs = {published: _job(_CALLS.value, published) for published in (False, True)}
  print(f"{_CALLS.value} epoch ends on each task, 2-worker MultiWorkerMirroredStrategy on "
        "loopback; ms per call")
  print(f"{'task':<26} {'without: median':>16} {'p95':>7} {'published: median':>18} {'p95':>7}")
  for i, name in enumerate(("worker:1 (publishes)", "worker:0, chief (reads)")):
    off, on = _median_p95_ms(runs[False][i]), _median_p95_ms(runs[True][i])
    print(f"{name:<26} {off[0]:>16.3f} {off[1]:>7.3f} {on[0]:>18.3f} {on[1]:>7.3f}")
  added = statistics.median(runs[True][0]) - statistics.median(runs[False][0])
  print(f"one publish a second adds {100 * added:.3f}% of the training thread's time")
  print(json.dumps({"calls": _CALLS.value, "ms": {
      ("published" if published else "without"): {
          task: dict(zip(("median", "p95"), _median_p95_ms(seconds)))
          for task, seconds in zip(("worker:1", "worker:0"), runs[published])}
      for published in runs}, "publish_share_of_a_second": added}, indent=1))


if __name__ == "__main__":
  app.run(main)
