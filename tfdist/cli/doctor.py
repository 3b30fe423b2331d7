"""`tfdist doctor`: versions, devices, the Keras x strategy matrix, the cluster.

Exits 1 when TF_CONFIG (or the SLURM environment) is invalid, a task does not
answer, or a measured Keras x strategy cell fails, so it can gate a job
script: `tfdist doctor && python train.py`.

`--check_keras=all` (or a list of strategies) measures the matrix instead of
only printing it: for each Keras and strategy, a 2-epoch `tfdist train` of the
default model in a fresh process (a local cluster for the multi-worker
strategies). All of it takes about 2.5 minutes on 2 CPU cores.
"""

import sys
import tempfile
from typing import List, Tuple

from absl import flags

from tfdist import _keras_support as keras_support
from tfdist.cli import _train_process as train_process
from tfdist.task import _keras as task_keras

# Strategy flag value -> (matrix cell, extra `tfdist train` flags) per cell.
CELLS = {strategy: [(label, [f"--workers={workers}"] * bool(workers) + [f"--ps={ps}"] * bool(ps))
                    for name, label, workers, ps in keras_support.CELLS if name == strategy]
         for strategy in dict.fromkeys(cell[0] for cell in keras_support.CELLS)}
CHECK_EPOCHS = 2

_TIMEOUT = flags.DEFINE_float("reachability_timeout", 2.0, "Seconds to wait for each task.",
                              lower_bound=0.1)
_CHECK_KERAS = flags.DEFINE_list(
    "check_keras", [], "Measure the Keras x strategy matrix for these strategies ('all': "
    f"every one of {list(CELLS)}): a short `tfdist train` per Keras and strategy.")
_CHECK_XLA = flags.DEFINE_bool("check_xla", False, "Fit one step with jit_compile=True under "
                                "each single-machine strategy here and report what happens.")
_CHECK_TIMEOUT = flags.DEFINE_float("check_keras_timeout", 180, "Seconds allowed per "
                                    "measured cell.", lower_bound=1)


@flags.validator("check_keras", f"--check_keras takes 'all' or strategies of {list(CELLS)}, "
                 "comma-separated.")
def _known_strategies(values):
  return set(values) <= set(CELLS) | {"all"}


def measure_keras(strategies) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Trains each (Keras, strategy) cell briefly; its rows and problems for the report."""
  rows, problems = [], []
  with tempfile.TemporaryDirectory(prefix="tfdist-doctor-") as workdir:
    for keras in task_keras.KERAS_CHOICES:
      for strategy in strategies:
        for label, extra in CELLS[strategy]:
          print(f"measuring {keras} x {label} ...", file=sys.stderr, flush=True)
          result = train_process.run(strategy, workdir, keras=keras, epochs=CHECK_EPOCHS,
                                     batch_size=64, timeout=_CHECK_TIMEOUT.value,
                                     extra_flags=extra)
          row = f"{keras:8} {label}"
          if "error" in result:
            last = next((line.strip() for line in reversed(result["log_tail"])
                         if line.strip()), "")
            rows.append((row, f"FAILS (measured, {result['error']}): {last}"))
            command = " ".join(["tfdist train", f"--keras={keras}", f"--strategy={strategy}",
                                *extra])
            problems.append(f"{keras} under {label} failed: run `{command}` to see why.")
            continue
          losses = result["losses"]
          trains = losses[-1] < losses[0]
          rows.append((row, f"{'works' if trains else 'RUNS BUT DOES NOT LEARN'} (measured: "
                            f"loss {losses[0]:.3f} -> {losses[-1]:.3f} in {CHECK_EPOCHS} "
                            f"epochs, {result['seconds']:.0f} s)"))
          if not trains:
            problems.append(f"{keras} under {label}: the loss did not fall "
                            f"({losses[0]:.4f} -> {losses[-1]:.4f}).")
  return rows, problems


def main(argv):
  del argv
  from tfdist import _doctor as doctor  # Deferred: imports TensorFlow.
  measured = None
  if _CHECK_KERAS.value:
    strategies = list(CELLS) if "all" in _CHECK_KERAS.value else _CHECK_KERAS.value
    measured = measure_keras(strategies)
  report = doctor.diagnose(reachability_timeout=_TIMEOUT.value, keras_measured=measured,
                           check_xla=_CHECK_XLA.value)
  print(report)
  return 1 if report.problems else 0
