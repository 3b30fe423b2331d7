"""`tfdist compare`: the same model under every strategy, back to back, one table.

Each strategy runs in a fresh `tfdist train` process (a fresh TF runtime, as
multi_worker_mirrored needs), on 2 logical CPU devices for the single-machine
strategies, a local 2-worker cluster for multi_worker_mirrored, and chief +
2 workers + 1 ps for parameter_server. Exit code 1 if any strategy fails or
misses single-device accuracy by more than --tolerance.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

from absl import flags

_STRATEGIES = flags.DEFINE_list(
    "strategies", ["one_device", "mirrored", "central_storage", "multi_worker_mirrored",
                   "parameter_server"], "Strategies to compare; the first is the baseline.")
_EPOCHS = flags.DEFINE_integer("epochs", 15, "Epochs per strategy.", lower_bound=1)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "Global batch size.", lower_bound=1)
_TOLERANCE = flags.DEFINE_float("tolerance", 0.05, "Largest accuracy gap to the baseline "
                                "(absolute) that still passes.", lower_bound=0)
_TIMEOUT = flags.DEFINE_float("timeout", 600, "Seconds allowed per strategy.", lower_bound=1)
_RESULT_FILE = flags.DEFINE_string("result_file", None, "Write all results as JSON here.")

_SINGLE_MACHINE = ("one_device", "mirrored", "central_storage")
_HEADER = ("strategy", "replicas", "mode", "accuracy", "examples/s", "step ms", "input wait",
           "time s")


def _run_one(name: str, workdir: str) -> dict:
  result_file = os.path.join(workdir, f"{name}.json")
  log_file = os.path.join(workdir, f"{name}.log")
  command = [sys.executable, "-m", "tfdist", "train", f"--strategy={name}",
             f"--epochs={_EPOCHS.value}", f"--batch_size={_BATCH_SIZE.value}",
             f"--result_file={result_file}", "--verbose=0", f"--timeout={_TIMEOUT.value}"]
  if name in _SINGLE_MACHINE:
    command.append("--devices=2")  # Two logical CPUs stand in for two GPUs.
  start = time.monotonic()
  with open(log_file, "w") as log:
    try:
      code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                            timeout=_TIMEOUT.value + 30).returncode
    except subprocess.TimeoutExpired:
      code = "timeout"
  seconds = time.monotonic() - start
  if code != 0 or not os.path.exists(result_file):
    with open(log_file) as log:
      tail = log.read().splitlines()[-15:]
    return {"strategy": name, "error": f"exit code {code}", "log_tail": tail,
            "seconds": seconds}
  with open(result_file) as f:
    result = json.load(f)
  result["seconds"] = seconds
  return result


def _row(r: dict):
  if "error" in r:
    return (r["strategy"], "-", "-", "FAILED", "-", "-", "-", f"{r['seconds']:.0f}")
  return (r["strategy"], str(r["replicas"]), "sync" if r["sync"] else "async",
          f"{r['accuracy']:.3f}", f"{r['examples_per_second']:.0f}",
          f"{r['step_time_ms']:.1f}",
          "n/a" if r["input_bound"] is None else f"{100 * r['input_bound']:.0f}%",
          f"{r['seconds']:.0f}")


def _print_table(rows) -> None:
  widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
  for n, row in enumerate(rows):
    print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    if n == 0:
      print("  ".join("-" * w for w in widths))


def main(argv):
  del argv
  names = _STRATEGIES.value
  results = []
  with tempfile.TemporaryDirectory(prefix="tfdist-compare-") as workdir:
    for i, name in enumerate(names, 1):
      print(f"[{i}/{len(names)}] {name} ...", end=" ", flush=True)
      result = _run_one(name, workdir)
      results.append(result)
      print("FAILED" if "error" in result else f"accuracy {result['accuracy']:.3f}",
            f"({result['seconds']:.0f} s)", flush=True)
      if "error" in result:
        print("\n".join(f"    {line}" for line in result["log_tail"]), flush=True)
  print()
  _print_table([_HEADER] + [_row(r) for r in results])
  failed = [r["strategy"] for r in results if "error" in r]
  baseline = results[0]
  off = []
  if "error" not in baseline:
    off = [r["strategy"] for r in results
           if "error" not in r and abs(r["accuracy"] - baseline["accuracy"]) > _TOLERANCE.value]
    print(f"\nEvery strategy trains the same model on the same data; accuracy must be within "
          f"{_TOLERANCE.value:.2f} of {baseline['strategy']} ({baseline['accuracy']:.3f}). "
          "step ms and examples/s are medians over epochs 2+; input wait is the share of "
          "a step spent waiting for data (n/a: parameter-server steps run remotely); "
          "on 2 CPU cores more replicas share the same cores, so they are not faster here.")
  if _RESULT_FILE.value:
    with open(_RESULT_FILE.value, "w") as f:
      json.dump(results, f, indent=1)
  if failed or off:
    print(f"FAILED: {failed} did not finish; {off} missed the accuracy tolerance.")
    return 1
  print("OK: every strategy reached single-device accuracy within tolerance.")
  return 0
