"""tfdist.launch: local clusters of processes, their output, exit codes and cleanup."""

import io
import json
import os
import re
import socket
import signal
import sys
import textwrap
import threading
import time

import pytest

import helpers
from tfdist import launch
from tfdist.launch import _supervision as supervision
from tfdist.cluster import ClusterSpec

PY = sys.executable


def run_cluster(code, spec, network=None, **options):
  out = io.StringIO()
  start = time.monotonic()
  code_ = launch.launch_local([PY, "-c", code], spec, launch.LaunchOptions(output=out, **options),
                              network=network)
  return code_, out.getvalue(), time.monotonic() - start


def alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  with open(f"/proc/{pid}/stat") as f:  # A zombie is gone for our purposes.
    return f.read().split(")")[1].split()[0] != "Z"


def test_every_task_gets_its_tf_config_and_a_prefix():
  spec = ClusterSpec.local(workers=2, chief=True)
  code = "import os; print(os.environ['TF_CONFIG'])"
  exit_code, output, _ = run_cluster(code, spec)
  assert exit_code == 0
  seen = {}
  for line in output.splitlines():
    prefix, _, rest = line.partition("] ")
    seen[prefix[1:]] = json.loads(rest)
  assert set(seen) == {"chief:0", "worker:0", "worker:1"}
  for name, config in seen.items():
    task_type, index = name.split(":")
    assert config["task"] == {"type": task_type, "index": int(index)}
    assert config["cluster"] == spec.as_dict()


def test_a_failing_task_stops_the_others_quickly_and_shows_its_tail(tmp_path):
  pid_dir = tmp_path
  code = (f"import os, json, time; c = json.loads(os.environ['TF_CONFIG']); "
          f"open(os.path.join({str(pid_dir)!r}, str(os.getpid())), 'w').close(); "
          "i = c['task']['index']; print('hello from', i, flush=True); "
          "(time.sleep(1), print('boom', flush=True), exit(7)) if i == 1 else time.sleep(600)")
  exit_code, output, seconds = run_cluster(code, ClusterSpec.local(workers=3))
  assert exit_code == 7
  assert seconds < 20
  assert "[tfdist launch] task worker:1 exited with code 7; stopping the other tasks" in output
  assert "  [worker:1] boom" in output
  pids = [int(p) for p in os.listdir(pid_dir)]
  assert len(pids) == 3 and not any(alive(p) for p in pids)


@pytest.mark.slow
def test_grandchildren_are_stopped_too(tmp_path):
  marker = tmp_path / "grandchild"
  code = ("import subprocess, sys, time; "
          "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
          f"open({str(marker)!r}, 'w').write(str(p.pid)); time.sleep(1); sys.exit(1)")
  exit_code, _, _ = run_cluster(code, ClusterSpec.local(workers=1))
  assert exit_code == 1
  assert not alive(int(marker.read_text()))


def test_parameter_servers_are_stopped_when_the_chief_ends():
  code = ("import os, json, time; t = json.loads(os.environ['TF_CONFIG'])['task']['type']; "
          "time.sleep(600) if t != 'chief' else print('chief done')")
  exit_code, output, seconds = run_cluster(code, ClusterSpec.local(workers=2, ps=1, chief=True))
  assert exit_code == 0 and "[chief:0] chief done" in output
  assert seconds < 20


def test_a_parameter_server_launch_without_a_chief_gets_one_and_waits_for_it():
  # Before: with no task that must finish, the launch returned 0 on its first
  # poll and stopped every task before anything ran.
  code = ("import os, json, time; t = json.loads(os.environ['TF_CONFIG'])['task']['type']; "
          "time.sleep(600) if t != 'chief' else (time.sleep(1), print('chief trained'))")
  result = helpers.run(helpers.tfdist_cli("launch", "--workers=2", "--ps=1", "--", PY, "-c",
                                          code), timeout=60)
  assert result.returncode == 0, result.stdout
  assert ("[tfdist launch] parameter-server training needs a chief to run the program and end "
          "the job; added one (chief + 2 worker(s) + 1 ps)") in result.stdout
  assert "[chief:0] chief trained" in result.stdout


def test_a_parameter_server_spec_without_a_chief_is_refused_before_anything_starts():
  spec = ClusterSpec({"worker": ["localhost:1", "localhost:2"], "ps": ["localhost:3"]})
  with pytest.raises(ValueError, match=r"A parameter-server cluster needs a chief.*chief=True"
                     r".*Received: ClusterSpec\(worker=.*ps=\['localhost:3'\]\)"):
    launch.launch_local([PY, "-c", "pass"], spec)


def test_workers_must_finish_without_ps():
  spec = ClusterSpec.local(workers=2)
  assert all(supervision.must_finish(spec, t) for t in spec.tasks())
  spec = ClusterSpec.local(workers=2, ps=1, chief=True, evaluator=True)
  assert [str(t) for t in spec.tasks() if supervision.must_finish(spec, t)] == ["chief:0",
                                                                          "evaluator:0"]


def test_timeout_stops_everything():
  exit_code, output, seconds = run_cluster("import time; time.sleep(600)",
                                           ClusterSpec.local(workers=2), timeout=1)
  assert exit_code == launch.TIMEOUT_EXIT_CODE
  assert "timeout after 1s; still running: ['worker:0', 'worker:1']" in output
  assert seconds < 15


def test_invalid_utf8_output_is_shown_not_fatal():
  code = "import sys; sys.stdout.buffer.write(b'bad \\xff\\xfe bytes\\n')"
  exit_code, output, _ = run_cluster(code, ClusterSpec.local(workers=1))
  assert exit_code == 0
  assert "[worker:0] bad \ufffd\ufffd bytes" in output


def test_command_not_found():
  with pytest.raises(launch.LaunchError, match=r"Could not start task worker:0.*"
                     r"Received: command=\['no-such-program-xyz'\]"):
    launch.launch_local(["no-such-program-xyz"], ClusterSpec.local(workers=2))


def test_empty_command():
  with pytest.raises(ValueError, match=r"`command` is empty"):
    launch.launch_local([], ClusterSpec.local(workers=1))


@pytest.mark.slow
def test_worker_killed_mid_training_is_a_readable_error_in_seconds(tmp_path):
  command = helpers.tfdist_cli("launch", "--workers=2", "--timeout=300", "--", PY,
                               f"{helpers.SCRIPTS}/mwms_long.py", str(tmp_path))
  with helpers.spawned(command) as process:
    helpers.wait_for_files(tmp_path, 2)
    pids = {name: int((tmp_path / name).read_text()) for name in os.listdir(tmp_path)}
    os.kill(pids["worker-1"], signal.SIGKILL)
    killed_at = time.monotonic()
    out, _ = process.communicate(timeout=120)
    seconds = time.monotonic() - killed_at
  assert process.returncode == 128 + signal.SIGKILL
  assert "[tfdist launch] task worker:1 exited with code -9; stopping the other tasks" in out
  assert seconds < 30
  assert not any(alive(pid) for pid in pids.values())


def test_sigterm_stops_every_task(tmp_path):
  code = (f"import os, time; open(os.path.join({str(tmp_path)!r}, str(os.getpid())), 'w')"
          ".close(); time.sleep(600)")
  with helpers.spawned(helpers.tfdist_cli("launch", "--workers=2", "--", PY, "-c", code)) \
      as process:
    helpers.wait_for_files(tmp_path, 2, seconds=60)
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=60)
  assert process.returncode == 128 + signal.SIGTERM
  assert "received SIGTERM; stopping every task" in out
  assert not any(alive(int(pid)) for pid in os.listdir(tmp_path))


def epoch_starts(output: str, task: str = "worker:0", epochs: int = 6) -> list:
  return [int(n) for n in re.findall(rf"^\[{task}\] Epoch (\d+)/{epochs}", output, re.M)]


@pytest.mark.slow
def test_max_restarts_resumes_after_a_worker_is_killed_mid_epoch(tmp_path):
  command = helpers.tfdist_cli(
      "train", "--strategy=multi_worker_mirrored", "--epochs=6", "--verbose=2",
      "--max_restarts=1", f"--checkpoint_dir={tmp_path}")
  # SIGKILL worker 1 once epoch 3 has begun.
  head, rest, code = helpers.signal_when(command, r"^\[worker:1\] Epoch 3/6", signal.SIGKILL,
                                         task=("worker", 1))
  out = head + rest
  assert code == 0, out[-3000:]
  assert "task worker:1 exited with code -9; restarting every task (0 restarts left)" in out
  first, second = out.split("restarting every task", 1)
  interrupted = max(epoch_starts(first))
  resumed = epoch_starts(second)
  # Every epoch finishes once; only the interrupted one (if it had not ended) runs twice.
  assert resumed == list(range(resumed[0], 7))
  assert resumed[0] in (interrupted, interrupted + 1) and resumed[0] >= 3
  digests = set(re.findall(r"\] strategy=.* weights=(\w+)", second))
  assert len(digests) == 1  # Both workers end identical.


def test_restarts_are_bounded(tmp_path):
  code, out, _ = run_cluster("import sys; sys.exit(3)", ClusterSpec.local(workers=2),
                             max_restarts=2)
  assert code == 3
  assert out.count("restarting every task") == 2
  assert "(0 restarts left)" in out and "stopping the other tasks" in out


def test_private_network_hides_the_tasks_from_this_machine(tmp_path):
  # Every task listens on all interfaces, as TensorFlow's servers do; worker 1
  # reaches worker 0 but this process, outside the namespace, does not.
  spec = ClusterSpec.local(workers=2)
  port = int(spec.jobs["worker"][0].rsplit(":", 1)[1])
  code = f"""
import json, os, socket, sys, time
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
if task == 0:
  s = socket.create_server(("", {port}))
  open({str(tmp_path / "listening")!r}, "w").close()
  s.settimeout(60)
  s.accept()
else:
  for _ in range(300):
    try:
      socket.create_connection(("localhost", {port}), timeout=1).close()
      break
    except OSError:
      time.sleep(0.2)
  else:
    sys.exit(5)
  time.sleep(1)
"""
  seen_from_outside = []

  def probe():
    helpers.wait_for_files(tmp_path, 1, seconds=60)
    try:
      socket.create_connection(("127.0.0.1", port), timeout=1).close()
      seen_from_outside.append(True)
    except OSError:
      seen_from_outside.append(False)

  prober = threading.Thread(target=probe)
  prober.start()
  exit_code, out, _ = run_cluster(code, spec, network="loopback", timeout=120)
  prober.join()
  assert exit_code == 0, out
  assert seen_from_outside == [False]


def test_network_arguments_are_checked():
  spec = ClusterSpec({"worker": ["10.0.0.1:2222"]})
  with pytest.raises(ValueError, match=r"network='loopback' needs a cluster on loopback.*"
                     r"Received: hosts \['10.0.0.1'\]"):
    launch.launch_local([PY, "-c", "pass"], spec, network="loopback")
  with pytest.raises(ValueError, match=r"`network` must be one of \['auto', 'loopback', "
                     r"'host'\]. Received: 'lan'"):
    launch.launch_local([PY, "-c", "pass"], spec, network="lan")
  with pytest.raises(ValueError, match=r"`max_restarts` must be an integer >= 0. "
                     r"Received: max_restarts=-1"):
    launch.LaunchOptions(max_restarts=-1)


@pytest.mark.slow
@pytest.mark.parametrize("keras", ["tf_keras", "keras3"])  # fit; tfdist.training.loop for Keras 3.
def test_parameter_server_training_survives_a_killed_worker(keras):
  command = helpers.tfdist_cli("train", "--strategy=parameter_server", "--epochs=6",
                               "--verbose=2", f"--keras={keras}")
  # SIGKILL worker 1 once epoch 3 has begun.
  head, rest, code = helpers.signal_when(command, r"^\[chief:0\] Epoch 3/6", signal.SIGKILL,
                                         task=("worker", 1))
  out = head + rest
  assert code == 0, out[-3000:]
  assert "task worker:1 exited with code -9; training goes on with ['worker:0']" in out
  # The coordinator lost it mid-training and re-ran its steps on worker 0.
  assert re.search(r"\[chief:0\] .*Worker /job:worker/replica:0/task:1 failed", out), out[-3000:]
  assert epoch_starts(out, "chief:0") == [1, 2, 3, 4, 5, 6]
  accuracy = float(re.search(r"\[chief:0\] strategy=.* accuracy=([\d.]+)", out).group(1))
  assert accuracy > 0.7


@pytest.mark.slow
def test_a_sigkilled_launcher_leaves_no_task_and_no_port_behind(tmp_path):
  # Before: the tasks, each in its own session, outlived the launcher forever.
  command = helpers.tfdist_cli("launch", "--chief", "--workers=1", "--ps=1", "--network=host",
                               "--", sys.executable,
                               os.path.join(helpers.SCRIPTS, "serve_or_sleep.py"), str(tmp_path))
  with helpers.spawned(command) as launcher:
    helpers.wait_for_files(tmp_path, 3, seconds=120)
    pids = {name: int((tmp_path / name).read_text()) for name in os.listdir(tmp_path)}
    ports = {port for _, port in helpers.listening(pids.values())}
    assert len(ports) >= 2, ports  # The worker's and the ps's TF servers.
    os.kill(launcher.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    # A killed process's main thread is a zombie before its other threads (and
    # their sockets) are gone: wait for the listeners too.
    while time.monotonic() < deadline and (any(_alive(pid) for pid in pids.values())
                                           or _still_listening(ports)):
      time.sleep(0.2)
  left = {name: pid for name, pid in pids.items() if _alive(pid)}
  assert not left, f"tasks outlived the launcher: {left}"
  assert not _still_listening(ports)
  for port in ports:
    with socket.socket() as s:
      # SO_REUSEADDR: the dead servers' closed connections may sit in TIME_WAIT
      # on the port; a LISTEN socket would still refuse this bind on Linux.
      s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
      s.bind(("", port))  # Free again.


def _alive(pid: int) -> bool:
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except FileNotFoundError:
    return False


def _still_listening(ports) -> set:
  """Those of `ports` that some socket on this machine still listens on."""
  return {port for _, port in helpers.listening() if port in ports}


def test_a_sigkilled_launcher_leaves_no_task_and_no_folder_behind_in_a_private_network(tmp_path):
  # The tasks run behind nsenter there: the parent-death signal must survive it. The
  # launcher's folders (the tasks' records, their progress for the stall watchdog) go
  # too, though no finally ran: they are made in the launcher's TMPDIR, watched here.
  script = ("import json, os, sys, time; t = json.loads(os.environ['TF_CONFIG'])['task']; "
            "open(os.path.join(sys.argv[1], str(t['index'])), 'w').write(str(os.getpid())); "
            "time.sleep(300)")
  pids_dir, temporary = tmp_path / "pids", tmp_path / "tmp"
  pids_dir.mkdir()
  temporary.mkdir()
  command = helpers.tfdist_cli("launch", "--workers=2", "--stall_timeout=300", "--",
                               sys.executable, "-c", script, str(pids_dir))
  with helpers.spawned(command, env={"TMPDIR": str(temporary)}) as launcher:
    helpers.wait_for_files(pids_dir, 2, seconds=60)
    pids = [int((pids_dir / name).read_text()) for name in os.listdir(pids_dir)]
    folders = sorted(name.rsplit("-", 1)[0] for name in os.listdir(temporary))
    assert folders == ["tfdist-joined", "tfdist-progress"], folders
    os.kill(launcher.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (any(_alive(pid) for pid in pids)
                                           or os.listdir(temporary)):
      time.sleep(0.2)
  assert not [pid for pid in pids if _alive(pid)]
  assert not os.listdir(temporary)


@pytest.mark.slow
def test_a_second_ctrl_c_during_the_grace_period_leaves_no_task_group_behind(tmp_path):
  # Before: the handlers were restored before the tasks were stopped, so a
  # second SIGINT cut the stop short and the SIGKILL to each group never came.
  stubborn = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              "time.sleep(600)")
  # The task takes 2 s to stop (a backup, say); its child ignores SIGTERM.
  task = (f"import os, signal, subprocess, sys, time; "
          "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(2), sys.exit(0))); "
          f"child = subprocess.Popen([sys.executable, '-c', {stubborn!r}]); "
          f"open(os.path.join({str(tmp_path)!r}, str(child.pid)), 'w').close(); "
          f"open(os.path.join({str(tmp_path)!r}, str(os.getpid())), 'w').close(); "
          "time.sleep(600)")
  with helpers.spawned(helpers.tfdist_cli("launch", "--workers=1", "--grace_period=5", "--",
                                          PY, "-c", task)) as process:
    helpers.wait_for_files(tmp_path, 2, seconds=60)
    time.sleep(1)  # The stubborn child has set its handler.
    process.send_signal(signal.SIGINT)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)  # Impatient.
    out, _ = process.communicate(timeout=60)
  assert process.returncode == 128 + signal.SIGINT, out
  pids = [int(pid) for pid in os.listdir(tmp_path)]
  deadline = time.monotonic() + 10
  while time.monotonic() < deadline and any(alive(pid) for pid in pids):
    time.sleep(0.2)
  assert not [pid for pid in pids if alive(pid)]


def test_no_private_network_is_refused_unless_the_host_network_is_accepted(tmp_path):
  # Before: the launcher fell back to the host network with a single line.
  # Without util-linux on PATH no namespace can be made, as where the kernel forbids it.
  code = "print('task ran')"
  no_tools = {"PATH": str(tmp_path)}
  refused = helpers.run(helpers.tfdist_cli("launch", "--workers=1", "--", PY, "-c", code),
                        timeout=60, env=no_tools)
  assert refused.returncode == 2, refused.stdout
  assert ("tfdist launch: no private network can be made here, and without one the tasks' "
          "TensorFlow servers would listen on every interface") in refused.stdout
  assert "pass --network=host (network='host'), or set TFDIST_NETWORK=host" in refused.stdout
  assert "Received: install util-linux" in refused.stdout
  assert "task ran" not in refused.stdout
  # Accepted by the flag, or by the variable for commands that launch themselves.
  for flags, env in ((["--network=host"], no_tools), ([], {**no_tools, "TFDIST_NETWORK": "host"})):
    result = helpers.run(helpers.tfdist_cli("launch", "--workers=1", *flags, "--", PY, "-c", code),
                         timeout=60, env=env)
    assert result.returncode == 0 and "[worker:0] task ran" in result.stdout, result.stdout
  bad = helpers.run(helpers.tfdist_cli("launch", "--workers=1", "--", PY, "-c", code),
                    timeout=60, env={"TFDIST_NETWORK": "lan"})
  assert bad.returncode != 0
  assert "`TFDIST_NETWORK` must be one of ['auto', 'loopback', 'host']. Received: 'lan'" \
      in bad.stdout


@pytest.mark.slow
def test_trainers_read_every_example_once_through_the_data_service_and_survive_a_lost_data_worker():
  """2 trainers, a dispatcher and 2 data workers; data worker 0 is killed mid-epoch."""
  command = helpers.tfdist_cli("launch", "--workers=2", "--data_workers=2", "--timeout=240",
                               "--", PY, f"{helpers.SCRIPTS}/data_service_train.py", "1000", "4")
  before, after, code = helpers.signal_when(command, r"\[worker:\d\] PAUSED", signal.SIGKILL,
                                            process=("data_service", "--role=worker"),
                                            timeout=240)
  out = before + after
  assert code == 0, out[-3000:]
  assert re.search(r"\[tfdist launch\] tf.data service data_worker:\d exited with code -9; "
                   r"restarting it on its port \(it registers again; the splits it held this "
                   r"epoch are not visited\) \(2 restarts left\)", out), out[-3000:]
  results = {}
  for line in re.findall(r"\[worker:\d\] RESULT (.*)", out):
    result = json.loads(line)
    results[result["epoch"], result["task"]] = result
  assert helpers.read_once(results, 0) == (1000, 1000, True)
  # At most once when a data worker is lost (TF's guarantee): no duplicates,
  # the epoch ends, most of it arrives.
  read, distinct, _ = helpers.read_once(results, 1)
  assert read == distinct and read > 500, read
  fits = [json.loads(line) for line in re.findall(r"\[worker:\d\] FIT (.*)", out)]
  assert len(fits) == 2 and fits[0] == fits[1]  # Same losses and weights on both.
  assert len(fits[0]["loss"]) == 3
  assert fits[0]["loss"][-1] < fits[0]["loss"][0] / 2


@pytest.mark.slow
def test_a_lost_dispatcher_without_a_journal_stops_the_job_and_says_why(tmp_path):
  code = "import time; time.sleep(600)"
  command = helpers.tfdist_cli("launch", "--workers=1", "--data_workers=1", "--grace_period=1",
                               "--", PY, "-c", code)
  _, out, exit_code = helpers.signal_when(command, r"dispatcher listening", signal.SIGKILL,
                                          process=("data_service", "--role=dispatcher"),
                                          timeout=120)
  assert exit_code == 128 + signal.SIGKILL, out
  assert ("tf.data service dispatcher:0 exited with code -9; stopping every task: without "
          "--data_work_dir its jobs and the splits it handed out are lost") in out


@pytest.mark.slow
def test_a_lost_dispatcher_with_a_journal_is_restarted(tmp_path):
  # The worker stays until the test has seen the restarted dispatcher listen,
  # so the job cannot end before it is back (a fixed sleep lost that race once
  # under CI's load, and a worker polling the port missed the first start).
  journal, release = tmp_path / "journal", tmp_path / "release"
  code = textwrap.dedent(f"""
      import os, time
      print('service at', os.environ['TFDIST_DATA_SERVICE'], flush=True)
      deadline = time.monotonic() + 120
      while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:
        time.sleep(0.1)
      print('released:', os.path.exists({str(release)!r}), flush=True)
      """)
  command = helpers.tfdist_cli("launch", "--workers=1", "--data_workers=1", "--timeout=180",
                               f"--data_work_dir={journal}", "--", PY, "-c", code)
  lines, listening = [], 0
  with helpers.spawned(command) as job:
    for line in job.stdout:
      lines.append(line)
      if re.match(r"\[dispatcher:0\] tf.data service dispatcher listening", line):
        listening += 1
        if listening == 1:
          os.kill(helpers.command_pid(job.pid, "data_service --role=dispatcher"), signal.SIGKILL)
        else:
          release.touch()
    exit_code = job.wait(timeout=60)
  out = "".join(lines)
  assert exit_code == 0, out
  assert (f"tf.data service dispatcher:0 exited with code -9; restarting it on its port from "
          f"its journal in {journal}") in out
  assert listening == 2, out
  assert "[worker:0] service at grpc://localhost:" in out
  assert "[worker:0] released: True" in out
  assert os.listdir(journal)


def test_data_work_dir_without_data_workers_is_refused():
  result = helpers.run(helpers.tfdist_cli("launch", "--workers=1", "--data_work_dir=/tmp/x",
                                          "--", PY, "-c", "pass"), timeout=60)
  assert result.returncode == 2
  assert "`data_work_dir` journals a tf.data service's dispatcher; give data_workers >= 1 " \
         "too. Received: data_workers=0, data_work_dir='/tmp/x'" in result.stdout
