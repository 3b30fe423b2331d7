"""The chaos soak: a 2-worker job under `tfdist launch`, stopped again and again, must end exact.

    python benchmarks/chaos.py --faults=20 --seed=0 [--output=chaos.json]

Runs benchmarks/chaos_job.py (a `tfdist.training.loop` job under
MultiWorkerMirroredStrategy, shuffled data, a checkpoint every 50 steps) under
`tfdist launch --workers 2 --max_restarts N`, and injects `--faults` faults at
seeded random steps, one kind each, in turn:

- `sigkill_worker`: SIGKILL worker 1; the launcher restarts every task.
- `sigterm_launcher`: SIGTERM `tfdist launch` (a scheduler stopping the job),
  then start it again, as the scheduler would.
- `sigkill_launcher`: SIGKILL `tfdist launch`, then start it again; its tasks
  must die with it.

It prints, per kind and in total: faults survived, steps run again (trained
after the last checkpoint, then rolled back; from the job's progress lines,
which lag by up to 0.05 s), the wall time each fault cost (from the fault
until the job was back at the step it had reached), and tasks and ports left
over after every stop; and at the end what was lost or repeated in what the
final model learned: the examples it learned from more or fewer times than the
epochs (counted by the job itself, in its checkpoint), and its weights against
the same training never interrupted.
"""

import collections
import json
import os
import queue
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from absl import app
from absl import flags

KINDS = ("sigkill_worker", "sigterm_launcher", "sigkill_launcher")
_FAULTS = flags.DEFINE_integer("faults", 20, "Faults to inject.", lower_bound=0)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the steps the faults land at.")
_KINDS = flags.DEFINE_list("kinds", list(KINDS), f"Fault kinds, taken in turn: {KINDS}.")
_EXAMPLES = flags.DEFINE_integer("examples", 64000, "The job's examples (64 per step).")
_EPOCHS = flags.DEFINE_integer("epochs", 3, "The job's epochs.")
_TIMEOUT = flags.DEFINE_float("timeout", 1800, "Give up after this many seconds.")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the results here, as JSON.")

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chaos_job.py")


def _pids_with(needle: str):
  """Processes whose command line holds `needle` (the run's own folder)."""
  found = []
  for name in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{name}/cmdline", "rb") as f:
        if needle.encode() in f.read():
          found.append(int(name))
    except OSError:
      pass
  return found


def _task_pid(needle: str, index: int):
  """The pid of task worker:`index` of this run (its TF_CONFIG says so)."""
  want = f'"task": {{"type": "worker", "index": {index}}}'.encode()
  for pid in _pids_with(needle):
    try:
      with open(f"/proc/{pid}/environ", "rb") as f:
        if want in f.read():
          return pid
    except OSError:
      pass
  return None


class Launch:
  """One `tfdist launch` process; its lines, time-stamped, in a queue."""

  def __init__(self, command):
    self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, text=True, errors="replace",
                                    start_new_session=True)
    self.lines = queue.Queue()
    threading.Thread(target=self._read, daemon=True).start()

  def _read(self):
    for line in self.process.stdout:
      self.lines.put((time.monotonic(), line.rstrip("\n")))
    self.lines.put((time.monotonic(), None))


def main(argv):
  del argv
  for kind in _KINDS.value:
    if kind not in KINDS:
      raise app.UsageError(f"--kinds: each must be one of {list(KINDS)}. Received: {kind!r}")
  from tfdist.cluster import preflight
  workdir = tempfile.mkdtemp(prefix="tfdist-chaos-")
  checkpoint_dir = os.path.join(workdir, "checkpoint")
  command = [sys.executable, "-m", "tfdist", "launch", "--workers=2",
             f"--max_restarts={_FAULTS.value}", "--grace_period=10", "--",
             sys.executable, JOB, checkpoint_dir, f"--examples={_EXAMPLES.value}",
             f"--epochs={_EPOCHS.value}"]
  total_steps = _EPOCHS.value * -(-_EXAMPLES.value // 64)
  rng = random.Random(_SEED.value)
  targets = sorted(rng.sample(range(total_steps // 20, total_steps * 19 // 20), _FAULTS.value))
  kinds = [_KINDS.value[i % len(_KINDS.value)] for i in range(_FAULTS.value)]
  rng.shuffle(kinds)

  faults, addresses, left_over = [], set(), []
  step, pending = -1, None  # The job's step; the fault waiting for the job to come back.
  start = time.monotonic()
  launch = Launch(command)
  launches = 1
  result = None
  print(f"chaos soak: {_FAULTS.value} faults at steps {targets} of {total_steps} "
        f"(seed {_SEED.value}) in {workdir}", flush=True)
  while True:
    if time.monotonic() - start > _TIMEOUT.value:
      os.killpg(launch.process.pid, signal.SIGKILL)
      raise SystemExit(f"chaos soak: gave up after {_TIMEOUT.value:g}s at step {step}")
    try:
      when, line = launch.lines.get(timeout=1)
    except queue.Empty:
      continue
    if line is None:  # This launcher ended.
      code = launch.process.wait()
      time.sleep(1)  # Orphans, if any, would still be here.
      left_over.append(len(_pids_with(workdir)))
      if result is not None and code == 0:
        break
      if pending is None or pending["kind"] == "sigkill_worker":
        raise SystemExit(f"chaos soak: tfdist launch ended with {code} unasked, at step {step}")
      launch = Launch(command)  # The scheduler starts the job again.
      launches += 1
      continue
    match = re.search(r"ClusterSpec\(worker=(\[[^\]]*\])", line)
    if match:
      addresses.update(re.findall(r"'([^']+)'", match.group(1)))
    saved = re.match(r"\[worker:0\] Loop: SIGTERM: saved a checkpoint at step (\d+)", line)
    if saved and pending is not None:  # Where it stopped, exactly (STEP lines lag).
      pending["reached"] = max(pending["reached"], int(saved.group(1)))
    match = re.match(r"\[worker:0\] (RESUMED|STEP) (\d+)$", line)
    if match:
      value = int(match.group(2))
      if match.group(1) == "RESUMED" and pending is not None:
        pending["resumed_from"] = value
      elif match.group(1) == "STEP":
        if pending is not None and "resumed_from" not in pending:
          pending["reached"] = max(pending["reached"], value)  # Still running on.
        elif pending is not None and value >= pending["reached"]:
          pending["seconds"] = when - pending["at"]
          faults.append(pending)
          pending = None
        step = value
    if line.startswith("[worker:0] RESULT "):
      result = json.loads(line.split("RESULT ", 1)[1])
    if pending is None and len(faults) < len(targets) and step >= targets[len(faults)]:
      kind = kinds[len(faults)]
      pending = {"kind": kind, "target": targets[len(faults)], "reached": step,
                 "at": time.monotonic()}
      if kind == "sigkill_worker":
        pid = _task_pid(workdir, 1)
        if pid is None:
          pending = None
          continue
        os.kill(pid, signal.SIGKILL)
      else:
        os.kill(launch.process.pid,
                signal.SIGTERM if kind == "sigterm_launcher" else signal.SIGKILL)

  ports_open = sorted(a for a in addresses if preflight.reachable(a, timeout=0.5))
  for fault in faults:
    fault["repeated"] = max(0, fault["reached"] - fault["resumed_from"])
  by_kind = collections.defaultdict(list)
  for fault in faults:
    by_kind[fault["kind"]].append(fault)
  print(f"\n{len(faults)} of {_FAULTS.value} faults survived in {time.monotonic() - start:.0f}s "
        f"({launches} launches); final step {result['step']} of {total_steps}")
  print(f"  {'fault':18} {'survived':>8} {'steps run again':>16} "
        f"{'seconds it cost (median, max)':>30}")
  for kind, rows in sorted(by_kind.items()) + [("total", faults)]:
    seconds = [r["seconds"] for r in rows]
    print(f"  {kind:18} {len(rows):8d} {sum(r['repeated'] for r in rows):16d} "
          f"{statistics.median(seconds):15.1f} {max(seconds):14.1f}")
  print(f"  examples learned from more often than {_EPOCHS.value} times: "
        f"{result['examples_seen_more_often']}, fewer times: "
        f"{result['examples_seen_fewer_times']}")
  print(f"  final weights vs the uninterrupted run: {result['relative_difference']:.1e} relative")
  print(f"  tasks left over after the {len(left_over)} stops: {sum(left_over)}; "
        f"ports still open: {len(ports_open)} of {len(addresses)}")
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump({"faults": faults, "result": result, "tasks_left_over": left_over,
                 "ports_open": ports_open, "launches": launches}, f, indent=1)


if __name__ == "__main__":
  app.run(main)
