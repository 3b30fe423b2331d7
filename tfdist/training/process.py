"""One `tfdist train` in a fresh process, and its result: what `compare` and `doctor` run.

A fresh process per run gives each strategy a fresh TF runtime, as
multi_worker_mirrored needs, and keeps one failing run from taking the others
down. The single-machine strategies get 2 logical CPU devices (standing in for
2 GPUs); multi-worker ones start their own local cluster.
"""

import json
import os
import subprocess
import sys
import time
from typing import Sequence

SINGLE_MACHINE = ("one_device", "mirrored", "central_storage")
LOG_TAIL_LINES = 15


def run(strategy: str, workdir: str, *, keras: str, epochs: int, batch_size: int,
        timeout: float, extra_flags: Sequence[str] = ()) -> dict:
  """Runs `tfdist train` once; its result as a dict, plus "seconds".

  A failed run gives {"strategy", "keras", "error", "log_tail", "seconds"}
  instead, with the last lines of its output.
  """
  name = f"{strategy}-{keras}-{len(os.listdir(workdir))}"
  result_file = os.path.join(workdir, f"{name}.json")
  log_file = os.path.join(workdir, f"{name}.log")
  command = [sys.executable, "-m", "tfdist", "train", f"--strategy={strategy}",
             f"--keras={keras}", f"--epochs={epochs}", f"--batch_size={batch_size}",
             f"--result_file={result_file}", "--verbose=0", f"--timeout={timeout}",
             *extra_flags]
  if strategy in SINGLE_MACHINE:
    command.append("--devices=2")
  start = time.monotonic()
  with open(log_file, "w") as log:
    try:
      code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                            timeout=timeout + 30).returncode
    except subprocess.TimeoutExpired:  # subprocess.run kills the child first.
      code = "timeout"
  seconds = time.monotonic() - start
  if code != 0 or not os.path.exists(result_file):
    with open(log_file) as log:
      tail = log.read().splitlines()[-LOG_TAIL_LINES:]
    return {"strategy": strategy, "keras": keras, "error": f"exit code {code}",
            "log_tail": tail, "seconds": seconds}
  with open(result_file) as f:
    result = json.load(f)
  result["seconds"] = seconds
  return result
