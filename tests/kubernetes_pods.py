"""The pods of a JobSet or TrainJob rehearsed as local processes, restarted as JobSet would.

There is no Kubernetes API server here. `Rehearsal(docs).start()` runs this
file as a program inside a new user, network and mount namespace: loopback
only, and its own /etc/hosts (bind-mounted) where every pod's host name
(`<jobset>-<job>-0-<i>.<subdomain>`) resolves to a loopback address of its
own. It then starts each pod's command (`tfdist.launch.kubernetes._jobset.pods`: the
environment its downward API and Job controller give it) and plays the JobSet
controller: a pod with `restartPolicy: OnFailure` restarts in place; any
other pod's failure fails its Job, and the failure policy restarts every pod
(`RestartJobSet`) while restarts are left. The JobSet succeeds when the
success policy's pods have exited 0; the others are then stopped.

Lines come out prefixed `[<pod host>] ...`, with `[jobset] ...` lines for
what the controller does; a line `kill HOST` on stdin SIGKILLs that pod, as
a lost node would. SIGUSR1 makes every pod write its threads' stacks (SIGABRT,
with PYTHONFAULTHANDLER) and the job fail: a rehearsal that times out says where
each pod waited (`Rehearsal.finish`).
"""

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time

import helpers


class Rehearsal:
  """The rehearsing process: `start(...)`, read `process.stdout`, `kill(host)`, `finish()`."""

  def __init__(self, docs, *, success_jobs=()):
    from tfdist.launch.kubernetes import _jobset as jobset  # pylint: disable=import-outside-toplevel
    spec = next(d for d in docs if d["kind"] in ("JobSet", "ClusterTrainingRuntime"))["spec"]
    spec = spec.get("template", {}).get("spec", spec)  # A runtime's JobSet template.
    self.plan = {"pods": jobset.pods(docs), "success_jobs": list(success_jobs),
                 "max_restarts": spec["failurePolicy"]["maxRestarts"]}
    self.process = None

  def start(self, directory):
    plan = os.path.join(directory, "plan.json")
    with open(plan, "w") as f:
      json.dump({**self.plan, "temporary": os.path.join(directory, "pods")}, f)
    self.process = subprocess.Popen(
        ["unshare", "--user", "--map-root-user", "--net", "--mount", "--", sys.executable,
         os.path.abspath(__file__), plan], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, errors="replace", cwd=helpers.REPO,
        env=helpers._environment(None), start_new_session=True)  # pylint: disable=protected-access
    return self

  def kill(self, host):
    self.process.stdin.write(f"kill {host}\n")
    self.process.stdin.flush()

  def finish(self, timeout, stacks_timeout=60):
    """Waits for the controller; returns everything it printed from here.

    On timeout, the AssertionError holds the pods' last lines and each one's stacks:
    one such timeout in CI said nothing of where a job of 11 s alone had waited.
    """
    try:
      return self.process.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
      output = ""
      try:
        self.process.send_signal(signal.SIGUSR1)
        output = self.process.communicate(timeout=stacks_timeout)[0] or ""
      except subprocess.TimeoutExpired:
        pass
      self.stop()
      raise AssertionError(f"the rehearsed job did not end within {timeout}s; the pods' last "
                           f"lines and their stacks:\n{output[-12000:]}") from None

  def stop(self):
    if self.process is not None:
      try:
        os.killpg(self.process.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
      self.process.wait()


def _hosts_file(pods):
  """/etc/hosts for the pods: each its own loopback address, by host and by full name."""
  lines = ["127.0.0.1 localhost"]
  lines += [f"127.0.0.{10 + i} {pod['fqdn']} {pod['host']}" for i, pod in enumerate(pods)]
  hosts = tempfile.NamedTemporaryFile("w", suffix=".hosts", delete=False)
  hosts.write("\n".join(lines) + "\n")
  hosts.close()
  subprocess.run(["mount", "--bind", hosts.name, "/etc/hosts"], check=True)
  os.unlink(hosts.name)  # The mount keeps the file for this namespace.


def _start(pod, output_lock, temporary_root):
  command = [sys.executable if pod["command"][0] == "python" else pod["command"][0],
             *pod["command"][1:]]
  from tfdist.launch import _supervision as supervision  # pylint: disable=import-outside-toplevel
  # The image's python: this one, for the command and what it runs.
  path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
  # Each pod its own temporary folder, as each has its own filesystem: what a pod killed
  # leaves there goes with the pod (the folders are in the test's own, which pytest removes).
  temporary = os.path.join(temporary_root, pod["host"])
  os.makedirs(temporary, exist_ok=True)
  process = subprocess.Popen(command, env={**os.environ, **pod["env"], "PATH": path,
                                           "PYTHONUNBUFFERED": "1", "TMPDIR": temporary},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True,
                             preexec_fn=supervision.die_with_parent(os.getpid()))

  def pump():
    for raw in iter(process.stdout.readline, b""):
      with output_lock:
        print(f"[{pod['host']}] {raw.decode(errors='replace').rstrip()}", flush=True)
  threading.Thread(target=pump, daemon=True).start()
  return process


def _stop(processes):
  for process in processes.values():
    try:
      os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
  for process in processes.values():
    process.wait()


def _stacks(processes, lock) -> int:
  """Every pod's Python processes write their stacks and end (SIGABRT); the job fails."""
  with lock:
    print("[jobset] timed out: every pod writes its stacks (SIGABRT)", flush=True)
  for process in processes.values():  # As a timed-out test's command does.
    helpers._abort_group(process)  # pylint: disable=protected-access
  time.sleep(1)  # The pumps print the last lines.
  return 1


def _control(plan) -> int:
  """The JobSet controller, for pods on this machine; the JobSet's exit code."""
  temporary_root = plan["temporary"]  # In the test's own folder: pytest removes it.
  from tfdist.launch import private_network  # pylint: disable=import-outside-toplevel
  private_network.loopback_up()
  _hosts_file(plan["pods"])
  commands = queue.Queue()
  threading.Thread(target=lambda: [commands.put(l.split()) for l in sys.stdin],
                   daemon=True).start()
  signal.signal(signal.SIGUSR1, lambda *_: commands.put(["stacks"]))
  lock = threading.Lock()
  pods = {pod["host"]: pod for pod in plan["pods"]}
  targets = [h for h, p in pods.items()
             if not plan["success_jobs"] or p["replicated_job"] in plan["success_jobs"]]
  restarts = 0
  while True:
    processes = {host: _start(pod, lock, temporary_root) for host, pod in pods.items()}
    failed = None
    while failed is None:
      while not commands.empty():
        verb, *host = commands.get()
        if verb == "kill":
          os.killpg(processes[host[0]].pid, signal.SIGKILL)
        elif verb == "stacks":
          return _stacks(processes, lock)
      for host, process in processes.items():
        code = process.poll()
        if code in (None, 0):
          continue
        if pods[host]["restart_policy"] == "OnFailure":
          with lock:
            print(f"[jobset] pod {host} exited with {code}; restarting it in place", flush=True)
          processes[host] = _start(pods[host], lock, temporary_root)
        else:
          failed = host, code
          break
      if all(processes[h].poll() == 0 for h in targets):
        with lock:
          print("[jobset] succeeded", flush=True)
        _stop(processes)
        return 0
      time.sleep(0.1)
    _stop(processes)
    with lock:
      if restarts >= plan["max_restarts"]:
        print(f"[jobset] pod {failed[0]} failed ({failed[1]}); no restarts left: failed",
              flush=True)
        return 1
      restarts += 1
      print(f"[jobset] pod {failed[0]} failed ({failed[1]}): RestartJobSet, attempt {restarts} "
            f"of {plan['max_restarts']}", flush=True)


if __name__ == "__main__":
  with open(sys.argv[1]) as f:
    sys.exit(_control(json.load(f)))
