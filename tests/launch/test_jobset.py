"""tfdist.launch.kubernetes._jobset: the pods of a JobSet and a TrainJob, rehearsed as processes, train.

No Kubernetes API server runs here: `tests/kubernetes_pods.py` runs each pod's
command with the environment Kubernetes would give it, host names resolving
to loopback addresses in a private network and mount namespace, and restarts
every pod when one fails, as the JobSet's failure policy says.
"""

import json
import os
import re

import pytest

import helpers
import kubernetes_pods
from tfdist.launch import Job
from tfdist.launch.kubernetes import _manifests as kubernetes
from tfdist.launch.kubernetes import _jobset as jobset

SCRIPT = os.path.join(helpers.SCRIPTS, "ray_fit.py")


def _results(stdout):
  return {m.group(1): json.loads(m.group(2))
          for m in re.finditer(r"^\[([\w-]+)\] RESULT (.*)$", stdout, re.M)}


def _rehearsed_to_the_end(docs, tmp_path, success_jobs=()):
  """The pods' output, once the rehearsed job succeeded (it fails the test otherwise)."""
  rehearsal = kubernetes_pods.Rehearsal(docs, success_jobs=success_jobs).start(str(tmp_path))
  try:
    stdout = rehearsal.finish(timeout=240)
  finally:
    rehearsal.stop()
  assert rehearsal.process.returncode == 0, stdout[-3000:]
  return stdout


@pytest.mark.slow
def test_a_jobset_pod_killed_mid_training_restarts_the_whole_job_which_resumes_from_its_backup(
    tmp_path):
  docs = jobset.jobset(
      Job(workers=2),
      ["python", SCRIPT, "tf_keras", "multi_worker_mirrored", f"backup={tmp_path / 'backup'}"],
      kubernetes.ManifestOptions(name="digits", image="img:1", max_restarts=1))
  rehearsal = kubernetes_pods.Rehearsal(docs).start(str(tmp_path))
  lines = []
  try:
    for line in rehearsal.process.stdout:
      lines.append(line)
      if line.startswith("[digits-worker-0-1] EPOCH 2"):
        rehearsal.kill("digits-worker-0-1")  # As a lost node.
        break
    stdout = "".join(lines) + rehearsal.finish(timeout=240)
  finally:
    rehearsal.stop()
  assert rehearsal.process.returncode == 0, stdout[-3000:]
  # Each pod built its TF_CONFIG from its labels, at its stable host name.
  assert re.search(r"^\[digits-worker-0-1\] tfdist task: worker:1 of ClusterSpec\(worker="
                   r"\['digits-worker-0-0.digits:2222', 'digits-worker-0-1.digits:2223'\], "
                   r"task='worker:1'\) \(from jobset\)$", stdout, re.M), stdout[-3000:]
  assert "[jobset] pod digits-worker-0-1 failed (-9): RestartJobSet, attempt 1 of 1" in stdout
  restarted = stdout[stdout.index("RestartJobSet"):]
  assert len(re.findall(r"BackupAndRestore: resuming after epoch \d", restarted)) == 2
  results = _results(restarted)
  assert results["digits-worker-0-0"]["weights"] == results["digits-worker-0-1"]["weights"]
  losses = results["digits-worker-0-0"]["losses"]
  assert losses[-1] < losses[0], losses


@pytest.mark.slow
def test_a_trainjob_of_a_chief_a_worker_and_a_ps_trains_to_the_end(tmp_path):
  docs = jobset.trainjob(Job(workers=1, ps=1, chief=True),
                         ["python", SCRIPT, "tf_keras", "parameter_server"],
                         kubernetes.ManifestOptions(name="digits", image="img:1", max_restarts=0))
  stdout = _rehearsed_to_the_end(docs, tmp_path, success_jobs=["node"])
  assert re.search(r"^\[digits-node-0-2\] tfdist task: ps:0 of ClusterSpec\(chief=\["
                   r"'digits-node-0-0.digits:2222'\], worker=\['digits-node-0-1.digits:2223'\], "
                   r"ps=\['digits-node-0-2.digits:2224'\], task='ps:0'\) \(from trainjob\)$",
                   stdout, re.M), stdout[-3000:]
  losses = _results(stdout)["digits-node-0-0"]["losses"]
  assert losses[-1] < losses[0], losses


@pytest.mark.slow
def test_the_chief_pod_names_a_straggler_from_the_rows_the_pods_publish(tmp_path):
  # The pods share no folder: each task's row reaches the chief through TF's coordination service.
  docs = jobset.jobset(
      Job(workers=2),
      ["python", os.path.join(helpers.SCRIPTS, "stall.py"), "slow", str(tmp_path)],
      kubernetes.ManifestOptions(name="digits", image="img:1", max_restarts=0))
  stdout = _rehearsed_to_the_end(docs, tmp_path)
  assert re.search(r"^\[digits-worker-0-0\] tfdist: worker:1 holds the others back, waiting for "
                   r"its input \(\d+% of its steps; ", stdout, re.M), stdout[-3000:]
  # Each pod prints only its own row at its end: the launcher is not there to gather them.
  for pod, task in (("digits-worker-0-0", "worker:0"), ("digits-worker-0-1", "worker:1")):
    assert re.search(rf"^\[{pod}\] {task} +25 ", stdout, re.M), stdout[-3000:]


@pytest.mark.slow
def test_a_rehearsal_that_times_out_shows_each_pod_s_stack_and_leaves_no_pod(tmp_path):
  # A TrainJob that trains in 11 s alone once hung for its 240 s in CI, and the failure
  # said only that it timed out. Here both pods wait for good, in a function named for it.
  marker = f"pods_wait_{os.getpid()}"
  waits = (f"import threading\ndef {marker}():\n  threading.Event().wait()\n"
           f"print('waiting', flush=True)\n{marker}()\n")
  docs = jobset.jobset(Job(workers=2), ["python", "-c", waits],
                       kubernetes.ManifestOptions(name="waits", image="img:1", max_restarts=0))
  rehearsal = kubernetes_pods.Rehearsal(docs).start(str(tmp_path))
  try:
    with pytest.raises(AssertionError) as failed:
      rehearsal.finish(timeout=15)
  finally:
    rehearsal.stop()
  report = str(failed.value)
  assert report.startswith("the rehearsed job did not end within 15s; the pods' last lines and "
                           "their stacks:"), report[:500]
  assert "[jobset] timed out: every pod writes its stacks (SIGABRT)" in report, report
  for pod in ("waits-worker-0-0", "waits-worker-0-1"):
    assert f"[{pod}] waiting" in report, report
    assert re.search(rf"^\[{pod}\] .*in {marker}$", report, re.M), report
  left = [pid for pid in os.listdir("/proc") if pid.isdigit()
          and marker.encode() in _cmdline(pid)]
  assert left == [], left


def _cmdline(pid):
  try:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
      return f.read()
  except OSError:
    return b""
