"""How long from SIGTERM to a finished backup, per strategy, for the default job and a 100 MB model.

    python benchmarks/backup_time.py [--strategies=one_device,mirrored,...] [--output=F]

For each strategy and model (`tfdist train`'s default CNN, and
benchmarks/models/wide_100mb.py), starts `tfdist train --checkpoint_dir D`,
waits until training is under way (its first SIGTERM check has timed a backup,
"a backup takes ..."), sends SIGTERM to it (to `tfdist train` itself, which
passes it on to every task of a local cluster, as a scheduler would), and
reads the time until every task has logged its backup ("backed up") and until
the command has exited. Compare with the 15 s a GKE Spot pod gets and the 30 s
of Kubernetes and SLURM.
"""

import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

from absl import app
from absl import flags

STRATEGIES = ("one_device", "mirrored", "central_storage", "multi_worker_mirrored",
              "parameter_server")
MODELS = {"default": None,
          "wide_100mb": os.path.join(os.path.dirname(os.path.abspath(__file__)), "models",
                                     "wide_100mb.py")}
_STRATEGIES = flags.DEFINE_list("strategies", list(STRATEGIES), "Strategies to time.")
_MODELS = flags.DEFINE_list("models", list(MODELS), f"Models to time: {list(MODELS)}.")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the results here, as JSON.")


def _time_one(strategy: str, model: str) -> dict:
  workdir = tempfile.mkdtemp(prefix="tfdist-backup-")
  command = [sys.executable, "-m", "tfdist", "train", f"--strategy={strategy}", "--epochs=1000",
             "--verbose=0", f"--checkpoint_dir={workdir}"]
  if MODELS[model]:
    command.append(f"--model={MODELS[model]}")
  tasks = 2 if strategy == "multi_worker_mirrored" else 1
  process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, text=True, errors="replace",
                             start_new_session=True)
  lines = queue.Queue()
  threading.Thread(target=lambda: [lines.put((time.monotonic(), l)) for l in process.stdout]
                   + [lines.put((time.monotonic(), None))], daemon=True).start()
  probes, backed_up, sent, output = [], [], None, []
  deadline = time.monotonic() + 600
  try:
    while time.monotonic() < deadline:
      try:
        when, line = lines.get(timeout=1)
      except queue.Empty:
        continue
      if line is None:
        break
      output.append(line)
      probe = re.search(r"a backup takes ([\d.]+)s here", line)
      if probe:
        probes.append(float(probe.group(1)))
        if len(probes) == tasks and sent is None:
          time.sleep(2)  # Well into training.
          sent = time.monotonic()
          os.kill(process.pid, signal.SIGTERM)
      if "SIGTERM: backed up" in line:
        backed_up.append(when - sent)
    code = process.wait(timeout=max(1, deadline - time.monotonic()))
    exited = time.monotonic() - sent if sent else None
  finally:
    if process.poll() is None:
      os.killpg(process.pid, signal.SIGKILL)
  if len(backed_up) < tasks:
    raise SystemExit(f"{strategy}/{model}: {len(backed_up)} of {tasks} tasks logged a backup "
                     f"(exit code {process.returncode}):\n" + "".join(output[-30:]))
  return {"strategy": strategy, "model": model, "probe_seconds": max(probes),
          "sigterm_to_backup_seconds": max(backed_up), "sigterm_to_exit_seconds": exited,
          "exit_code": code}


def main(argv):
  del argv
  rows = []
  print(f"{'strategy':22} {'model':11} {'backup (probe)':>15} {'SIGTERM->backed up':>19} "
        f"{'SIGTERM->exit':>14}  fits 15 s / 30 s", flush=True)
  for model in _MODELS.value:
    for strategy in _STRATEGIES.value:
      row = _time_one(strategy, model)
      rows.append(row)
      worst = row["sigterm_to_exit_seconds"]
      print(f"{strategy:22} {model:11} {row['probe_seconds']:14.2f}s "
            f"{row['sigterm_to_backup_seconds']:18.2f}s {worst:13.2f}s  "
            f"{'yes' if worst < 15 else 'NO'} / {'yes' if worst < 30 else 'NO'}", flush=True)
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump(rows, f, indent=1)


if __name__ == "__main__":
  app.run(main)
