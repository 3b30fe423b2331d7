"""One `tfdist train` in a fresh process, and its result: what `compare` and `doctor` run.

A fresh process per run gives each strategy a fresh TF runtime, as
multi_worker_mirrored needs, and keeps one failing run from taking the others
down. The single-machine strategies get 2 logical CPU devices (standing in for
2 GPUs); multi-worker ones start their own local cluster.
"""

import os
import subprocess
import sys
import time
from typing import Mapping, Optional, Sequence

from tfdist import _choices as choices
from tfdist.task import _result_channel as result_channel

SINGLE_MACHINE = tuple(choices.strategy_names(choices.SINGLE_MACHINE))
LOG_TAIL_LINES = 15


def run(strategy: str, workdir: str, *, keras: str, epochs: int, batch_size: int,
        timeout: float, extra_flags: Sequence[str] = (),
        env: Optional[Mapping[str, str]] = None) -> dict:
  """Runs `tfdist train` once; its result as a dict, plus "seconds".

  `extra_flags` go to `tfdist train`; `env` adds to this process's environment.

  A failed run gives {"strategy", "keras", "error", "log_tail", "seconds"}
  instead, with the last lines of its output.
  """
  log_file = os.path.join(workdir, f"{strategy}-{keras}-{len(os.listdir(workdir))}.log")

  def start(result_file):
    command = [sys.executable, "-m", "tfdist", "train", f"--strategy={strategy}",
               f"--keras={keras}", f"--epochs={epochs}", f"--batch_size={batch_size}",
               f"--output={result_file}", "--verbose=0", f"--timeout={timeout}",
               *extra_flags] + (["--devices_per_worker=2"] if strategy in SINGLE_MACHINE else [])
    with open(log_file, "w") as log:
      try:
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                              env=None if env is None else {**os.environ, **env},
                              timeout=timeout + 30).returncode
      except subprocess.TimeoutExpired:  # subprocess.run kills the child first.
        return "timeout"

  began = time.monotonic()
  code, result = result_channel.run_for_json(start)
  seconds = time.monotonic() - began
  if result is None:
    with open(log_file) as log:
      tail = log.read().splitlines()[-LOG_TAIL_LINES:]
    return {"strategy": strategy, "keras": keras, "error": f"exit code {code}",
            "log_tail": tail, "seconds": seconds}
  result["seconds"] = seconds
  return result
