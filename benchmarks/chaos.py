"""The chaos soak: a 2-worker job under `tfdist launch`, stopped again and again, must end exact.

    python benchmarks/chaos.py --faults=20 --seed=0 [--output=chaos.json]

Runs benchmarks/chaos_job.py (a `tfdist.training.loop` job on shuffled data
that counts every example it trains on, a checkpoint every 50 steps) under
`tfdist launch --max_restarts N`, and injects `--faults` faults at seeded
random steps, the kinds in turn:

- `sigkill_worker`: SIGKILL worker 1 of a MultiWorkerMirroredStrategy job; the
  launcher restarts every task.
- `sigterm_launcher`: SIGTERM `tfdist launch` (a scheduler stopping the job),
  then start it again, as the scheduler would.
- `sigkill_launcher`: SIGKILL `tfdist launch`, then start it again; its tasks
  must die with it.
- `sigkill_data_worker`: SIGKILL a tf.data service data worker of the same
  job reading through the service (`--data_workers 2`); the launcher restarts
  it on its port.
- `sigkill_ps_worker`: SIGKILL worker 1 of a ParameterServerStrategy job
  (`--chief --ps 1`); the launcher restarts it alone and the coordinator runs
  its steps again.

The first three share one job (exactly once); the data service kind runs its
own job, and so does the parameter-server kind. It prints, per kind and in
total: faults survived, steps run again (trained after the last checkpoint,
then rolled back; from the job's progress lines, which lag by up to 0.05 s),
or, under parameter servers, steps applied more or fewer times than
scheduled, the wall time each fault cost (from the fault until the job was
back at the step it had reached, or until the killed process was started
again), and tasks and ports left over after every stop; and per job what was
lost or repeated in what the final model learned: the examples it learned
from more or fewer times than the epochs (counted by the job itself, in its
checkpoint), against the same job run without faults where the guarantee is
not exactly once, and, for the exactly-once job, its weights against the same
training never interrupted.

A fault that lands as the job finishes (the job ended whole before the
launcher's restart line or its next step showed) counts as survived, its
time until the launcher exited. A fault that could not be injected (its
process was not found, or the job ended before its step came) ends the soak
with an error: no run passes with a fault left out.
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

# Fault kind -> the job it is injected into.
MODES = {"sigkill_worker": "mwms", "sigterm_launcher": "mwms", "sigkill_launcher": "mwms",
         "sigkill_data_worker": "data_service", "sigkill_ps_worker": "parameter_server"}
KINDS = tuple(MODES)
LAUNCH_FLAGS = {"mwms": ["--workers=2"], "data_service": ["--workers=2", "--data_workers=2"],
                "parameter_server": ["--chief", "--workers=2", "--ps=1"]}
# The task whose lines tell the job's progress.
FIRST_TASK = {"mwms": "worker:0", "data_service": "worker:0", "parameter_server": "chief:0"}
_FAULTS = flags.DEFINE_integer("faults", 20, "Faults to inject.", lower_bound=0)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the steps the faults land at.")
_KINDS = flags.DEFINE_list("kinds", list(KINDS), f"Fault kinds, taken in turn: {KINDS}.")
_EXAMPLES = flags.DEFINE_integer("examples", 64000, "The job's examples (64 per step).")
_EPOCHS = flags.DEFINE_integer("epochs", 3, "The job's epochs.")
_TIMEOUT = flags.DEFINE_float("timeout", 1800, "Give up after this many seconds.")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the results here, as JSON.")
_BASELINE = flags.DEFINE_bool("baseline", True, "Also run the jobs that are not exactly once "
                              "without faults, to compare what they learn from.")

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


def _data_server_pids(launcher: int):
  """{pid: role} of the tf.data service servers `tfdist launch` (pid `launcher`) runs.

  Each runs in a process group of its own, so they are found as its descendants.
  """
  parents, commands = {}, {}
  for name in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{name}/stat") as f:
        parents[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
      with open(f"/proc/{name}/cmdline", "rb") as f:
        commands[int(name)] = f.read().split(b"\0")
    except (OSError, IndexError, ValueError):
      pass

  def descends(pid):
    while pid > 1:
      pid = parents.get(pid, 0)
      if pid == launcher:
        return True
    return False

  # The launcher starts each as `python -m <tfdist's server module> --role=...`.
  return {pid: ("worker" if b"--role=worker" in words else "dispatcher")
          for pid, words in commands.items()
          if any(w.endswith(b"_serve_data_service") for w in words) and descends(pid)}


def _alive(pid: int) -> bool:
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except OSError:
    return False


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


def run_job(mode, targets, kinds, total_steps, start):
  """One job under `tfdist launch`, with `kinds[i]` injected at step `targets[i]`; its record."""
  from tfdist.cluster import preflight
  workdir = tempfile.mkdtemp(prefix=f"tfdist-chaos-{mode}-")
  command = [sys.executable, "-m", "tfdist", "launch", *LAUNCH_FLAGS[mode],
             f"--max_restarts={max(1, len(targets))}", "--grace_period=10", "--",
             sys.executable, JOB, os.path.join(workdir, "checkpoint"), f"--mode={mode}",
             f"--examples={_EXAMPLES.value}", f"--epochs={_EPOCHS.value}"]
  first = re.escape(f"[{FIRST_TASK[mode]}] ")
  faults, addresses, left_over, servers = [], set(), [], {}
  not_found = None  # The step at which the next fault's process was last looked for in vain.
  step, pending = -1, None  # The job's step; the fault waiting for the job to come back.
  launch = Launch(command)
  launches = 1
  result = None
  print(f"chaos soak ({mode}): {len(targets)} faults at steps {targets} of {total_steps} "
        f"in {workdir}", flush=True)
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
      # Orphans, if any, would still be here a second later; none: no need to wait it out.
      deadline = time.monotonic() + 1
      while (_pids_with(workdir) or any(map(_alive, servers))) and time.monotonic() < deadline:
        time.sleep(0.05)
      left_over.append(len(_pids_with(workdir)) + sum(map(_alive, servers)))
      if result is not None and code == 0:
        if pending is not None:
          # Killed near the end: the job finished before the launcher's restart line
          # or its next step showed. It ended whole, so the fault was survived.
          pending.setdefault("resumed_from", pending["reached"])
          pending["seconds"] = when - pending["at"]
          faults.append(pending)
        if len(faults) < len(targets):  # Never a silent pass with a fault left out.
          why = (f"found no process to signal (last looked for at step {not_found})"
                 if not_found is not None else "was injected: the fault before it was still "
                 "pending")
          raise SystemExit(f"chaos soak ({mode}): the job ended at step {step} before "
                           f"{kinds[len(faults)]} (at step {targets[len(faults)]}) {why}")
        break
      if pending is None or pending["kind"] not in ("sigterm_launcher", "sigkill_launcher"):
        raise SystemExit(f"chaos soak: tfdist launch ended with {code} unasked, at step {step}")
      launch = Launch(command)  # The scheduler starts the job again.
      launches += 1
      continue
    match = re.search(r"ClusterSpec\((.*)\)$", line)
    if match and line.startswith("[tfdist launch]"):
      addresses.update(re.findall(r"'([^']+:\d+)'", match.group(1)))
    match = re.search(r"tf\.data service (?:dispatcher listening at grpc://(\S+)|"
                      r"worker on port (\d+),)", line)
    if match:
      addresses.add(match.group(1) or f"localhost:{match.group(2)}")
      servers.update(_data_server_pids(launch.process.pid))  # To look for once it has ended.
    saved = re.match(first + r"Loop: SIGTERM: saved a checkpoint at step (\d+)", line)
    if saved and pending is not None:  # Where it stopped, exactly (STEP lines lag).
      pending["reached"] = max(pending["reached"], int(saved.group(1)))
    if pending is not None and pending["kind"] in ("sigkill_data_worker", "sigkill_ps_worker") \
        and re.search(r"exited with code -9; restarting it", line):
      pending["resumed_from"] = pending["reached"]  # It goes on; the process is back.
    match = re.match(first + r"(RESUMED|STEP) (\d+)$", line)
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
    if line.startswith(f"[{FIRST_TASK[mode]}] RESULT "):
      result = json.loads(line.split("RESULT ", 1)[1])
    if pending is None and len(faults) < len(targets) and step >= targets[len(faults)]:
      kind = kinds[len(faults)]
      pending = {"kind": kind, "target": targets[len(faults)], "reached": step,
                 "at": time.monotonic()}
      if kind in ("sigkill_worker", "sigkill_ps_worker"):
        pid = _task_pid(workdir, 1)
      elif kind == "sigkill_data_worker":
        pid = min((p for p, role in _data_server_pids(launch.process.pid).items()
                   if role == "worker"), default=None)
      else:
        pid = launch.process.pid
      if pid is None:
        pending, not_found = None, step
        continue
      not_found = None
      os.kill(pid, signal.SIGTERM if kind == "sigterm_launcher" else signal.SIGKILL)
  ports_open = sorted(a for a in addresses if preflight.reachable(a, timeout=0.5))
  for fault in faults:
    fault["repeated"] = max(0, fault["reached"] - fault["resumed_from"])
    fault["lost"] = 0
  if mode == "parameter_server" and faults:
    # Closures re-run on another worker: what ran more or fewer times than
    # scheduled, counted on the ps task, for the faults together.
    faults[0]["repeated"] = max(0, result["applied"] - result["step"])
    faults[0]["lost"] = max(0, result["step"] - result["applied"])
  return {"mode": mode, "faults": faults, "result": result, "tasks_left_over": left_over,
          "ports_open": ports_open, "addresses": sorted(addresses), "launches": launches}


def main(argv):
  del argv
  for kind in _KINDS.value:
    if kind not in KINDS:
      raise app.UsageError(f"--kinds: each must be one of {list(KINDS)}. Received: {kind!r}")
  total_steps = _EPOCHS.value * (_EXAMPLES.value // 64)
  rng = random.Random(_SEED.value)
  kinds = [_KINDS.value[i % len(_KINDS.value)] for i in range(_FAULTS.value)]
  rng.shuffle(kinds)
  start = time.monotonic()
  print(f"chaos soak: {_FAULTS.value} faults (seed {_SEED.value})", flush=True)
  jobs = []
  for mode in dict.fromkeys(MODES[kind] for kind in _KINDS.value):
    mine = [kind for kind in kinds if MODES[kind] == mode]
    targets = sorted(rng.sample(range(total_steps // 20, total_steps * 19 // 20), len(mine)))
    jobs.append(run_job(mode, targets, mine, total_steps, start))
    if mode != "mwms" and _BASELINE.value:  # Not exactly once: the same job without faults.
      jobs[-1]["baseline"] = run_job(mode, [], [], total_steps, start)["result"]

  faults = [fault for job in jobs for fault in job["faults"]]
  by_kind = collections.defaultdict(list)
  for fault in faults:
    by_kind[fault["kind"]].append(fault)
  print(f"\n{len(faults)} of {_FAULTS.value} faults survived in {time.monotonic() - start:.0f}s")
  print(f"  {'fault':20} {'survived':>8} {'steps run again':>16} {'steps lost':>11} "
        f"{'seconds it cost (median, max)':>30}")
  for kind, rows in sorted(by_kind.items()) + [("total", faults)]:
    seconds = [r["seconds"] for r in rows] or [float("nan")]
    print(f"  {kind:20} {len(rows):8d} {sum(r['repeated'] for r in rows):16d} "
          f"{sum(r['lost'] for r in rows):11d} "
          f"{statistics.median(seconds):15.1f} {max(seconds):14.1f}")
  for job in jobs:
    result = job["result"]
    print(f"  {job['mode']} ({job['launches']} launches): final step {result['step']} of "
          f"{total_steps}; steps applied {result['applied']}; examples learned from more "
          f"often than {_EPOCHS.value} times: {result['examples_seen_more_often']}, fewer "
          f"times: {result['examples_seen_fewer_times']} ({result['examples_trained']} "
          "trained)")
    if "baseline" in job:
      base = job["baseline"]
      print(f"    the same job without faults: steps applied {base['applied']}; more often: "
            f"{base['examples_seen_more_often']}, fewer: {base['examples_seen_fewer_times']} "
            f"({base['examples_trained']} trained)")
    if "relative_difference" in result:
      print(f"    final weights vs the uninterrupted run: "
            f"{result['relative_difference']:.1e} relative")
    print(f"    tasks left over after the {len(job['tasks_left_over'])} stops: "
          f"{sum(job['tasks_left_over'])}; ports still open: {len(job['ports_open'])} of "
          f"{len(job['addresses'])}")
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump({"jobs": jobs}, f, indent=1)


if __name__ == "__main__":
  app.run(main)
