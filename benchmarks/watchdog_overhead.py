"""What the stall watchdog and the step timing cost a training step: Keras `fit` with and without.

    python benchmarks/watchdog_overhead.py [--steps=200] [--repeats=7]

Fits the default job's CNN (`tfdist train`'s small_cnn) on the embedded digits
with tf_keras under one device, batch 64, `--steps` steps per run, alternating
runs without and with what a launched task adds to every `fit`: the callback
that writes each step to the progress file and times it, and the input's last
step that notes when each batch leaves the pipeline (`tfdist.task.progress`,
installed into a temporary directory as the launcher's task site does), and
the callback alone (`TFDIST_INPUT_WAIT=0`: step times, no input wait). Prints
the median CPU and wall milliseconds per step of each, and their ratio (with
the quartiles of the CPU runs: the noise); then the launcher's side: one
`StallWatchdog.check()` (run once a second) over two tasks' files, and the
end-of-job `step_summary()`.
CPU time is the steady measure on a shared machine (docs/measuring.md).
"""

import json
import statistics
import tempfile
import time

from absl import app
from absl import flags

_STEPS = flags.DEFINE_integer("steps", 200, "Steps per run.", lower_bound=10)
_REPEATS = flags.DEFINE_integer("repeats", 7, "Runs of each, alternated.", lower_bound=1)


def main(argv):
  del argv
  import tensorflow as tf
  from tfdist import keras
  from tfdist.task import progress
  from tfdist.data import digits
  from tfdist.launch import watchdog
  from tfdist.training import job

  directory = tempfile.mkdtemp(prefix="watchdog-bench-")
  progress.install(directory, "worker", 0)
  (x, y), _ = digits.load_digits()
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64).prefetch(2)
  keras.utils.set_random_seed(0)
  model = job.small_cnn()
  model.compile(optimizer=keras.optimizers.SGD(0.05),
                loss=keras.losses.SparseCategoricalCrossentropy())
  reporters = progress.keras_callbacks(keras.callbacks.Callback)
  reporters[0]._supports_tf_logs = True  # As the task site marks it (never fetches logs).
  stamped = progress.stamped_input(dataset)  # As the task site passes fit's input.
  model.fit(dataset, epochs=1, steps_per_epoch=20, verbose=0)  # Traced and warm.
  model.fit(stamped, epochs=1, steps_per_epoch=20, verbose=0, callbacks=reporters)
  # on_no_input_wait: the step report without the input's stamp (TFDIST_INPUT_WAIT=0).
  times = {"off": [], "on": [], "on_no_input_wait": []}
  for _ in range(_REPEATS.value):
    for kind in times:
      callbacks = reporters if kind != "off" else []
      data = stamped if kind == "on" else dataset
      cpu, wall = time.process_time(), time.perf_counter()
      model.fit(data, epochs=1, steps_per_epoch=_STEPS.value, verbose=0, callbacks=callbacks)
      times[kind].append(((time.process_time() - cpu) * 1e3 / _STEPS.value,
                          (time.perf_counter() - wall) * 1e3 / _STEPS.value))
  result = {}
  for kind, runs in times.items():
    cpu = sorted(r[0] for r in runs)
    result[kind] = {"cpu_ms_per_step": statistics.median(cpu),
                    "cpu_ms_quartiles": statistics.quantiles(cpu, n=4)[::2] if len(cpu) > 1 else cpu,
                    "wall_ms_per_step": statistics.median(r[1] for r in runs)}
  result["cpu_ratio_on_off"] = result["on"]["cpu_ms_per_step"] / result["off"]["cpu_ms_per_step"]
  result["cpu_ratio_no_input_wait_off"] = (result["on_no_input_wait"]["cpu_ms_per_step"] /
                                           result["off"]["cpu_ms_per_step"])
  result["wall_ratio_on_off"] = (result["on"]["wall_ms_per_step"] /
                                 result["off"]["wall_ms_per_step"])
  progress.training_end()  # This task's last row of step times, as at a job's end.
  start = time.perf_counter()
  result["summary"] = watchdog.step_summary(directory)
  result["launcher_summary_us"] = (time.perf_counter() - start) * 1e6
  with open(f"{directory}/worker-1{progress.PROGRESS_SUFFIX}", "w") as f:
    f.write("1 5 6 step 0.01")
  dog = watchdog.StallWatchdog(directory, timeout=300)
  start, checks = time.perf_counter(), 1000
  for _ in range(checks):
    dog.check()
  result["launcher_check_us"] = (time.perf_counter() - start) * 1e6 / checks
  print(json.dumps(result, indent=1))


if __name__ == "__main__":
  app.run(main)
