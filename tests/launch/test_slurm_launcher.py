"""tfdist.launch.slurm._launcher: jobs through a real SLURM on localhost (slurmctld + slurmd)."""

import contextlib
import json
import os
import re
import subprocess
import stat
import sys
import time

import pytest

import helpers
import slurm_cluster
from tfdist import launch
from tfdist.launch.slurm import _launcher as sbatch


def test_render_fills_every_field():
  script = sbatch.render(["python", "train.py", "--epochs=3"], ntasks=4, num_ps=1,
                         output="/tmp/out-%j", job_name="demo", time_minutes=5,
                         extra_directives=["--partition=gpu"])
  assert "#SBATCH --ntasks=4" in script and "#SBATCH --job-name=demo" in script
  assert "#SBATCH --partition=gpu" in script and "#SBATCH --time=5" in script
  assert "export TFDIST_SLURM_NUM_PS=1" in script
  # $tfdist_net: the private network on one node, else nothing. Each task through
  # `tfdist task`: its TF_CONFIG, the task site, the stall watchdog beside it.
  assert ("srun --kill-on-bad-exit=1 --label --ntasks=4 $tfdist_net "
          f"{sys.executable} -m tfdist.launch._task -- python train.py --epochs=3") in script
  assert not re.search(r"\$\{\w+\}", script)  # No field left (the shell's own have :-).
  # One task is no cluster: its command runs as it is.
  assert "--ntasks=1 $tfdist_net python train.py || tfdist_code=$?\n" in sbatch.render(
      ["python", "train.py"], ntasks=1, output="o")


def test_a_node_that_refuses_the_private_network_runs_on_its_own_network(tmp_path):
  # The script's part that makes the namespace, with `unshare` refused at once (user
  # namespaces disabled), under the template's `set -euo pipefail`: a warning, not an
  # "unbound variable" that would end the job.
  script = sbatch.render(["true"], ntasks=2, output="/tmp/out-%j", job_name="demo",
                         time_minutes=5)
  start = script.index("tfdist_net=")
  part = script[start:script.index("\nfi\n", script.index("tfdist: WARNING", start)) + 4]
  (tmp_path / "part.sh").write_text("set -euo pipefail\nSLURM_JOB_NUM_NODES=1\n" +
                                   part.replace("exec unshare ", "exec false ")
                                   # The holder gone before it is read from: bash unset it.
                                   .replace("2>/dev/null; }", "2>/dev/null; }; sleep 1") +
                                   'echo "net=[$tfdist_net]"\n')
  done = subprocess.run(["bash", str(tmp_path / "part.sh")], capture_output=True, text=True,
                        timeout=60)
  assert done.returncode == 0, done.stderr
  assert "WARNING: no private network namespace" in done.stdout and "net=[]" in done.stdout


def test_render_rejects_an_unknown_template_field(tmp_path):
  template = tmp_path / "t.sbatch"
  template.write_text("#SBATCH --account=${account}\n")
  with pytest.raises(ValueError, match=r"has a field tfdist does not fill. Received: 'account'"):
    sbatch.render(["x"], ntasks=1, output="o", template=str(template))


@pytest.fixture(scope="module")
def slurm():
  reason = slurm_cluster.unavailable_reason()
  if reason:
    pytest.skip(reason)
  cluster = slurm_cluster.LocalSlurm().start()
  yield cluster
  cluster.stop()


@pytest.mark.slow
@pytest.mark.slurm
def test_slurms_daemons_and_srun_listen_on_loopback_only(slurm):
  # Before: slurmctld and slurmd listened on 0.0.0.0, reachable from beyond this machine.
  daemons = helpers.listening(p.pid for p in slurm._daemons)  # pylint: disable=protected-access
  assert len(daemons) == 2 and all(a == "127.0.0.1" for a, _ in daemons), daemons
  step = subprocess.Popen(["srun", "-N1", "-n1", "sleep", "5"], env=slurm.env)
  try:
    deadline, step_sockets = time.monotonic() + 30, []
    while not step_sockets and time.monotonic() < deadline and step.poll() is None:
      step_sockets = helpers.listening([step.pid])
      time.sleep(0.2)
    assert step_sockets and all(a == "127.0.0.1" for a, _ in step_sockets), step_sockets
  finally:
    try:
      step.wait(timeout=30)  # It ends by itself; a killed srun would leave its job to clean up.
    except subprocess.TimeoutExpired:
      step.kill()
      step.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.slurm
def test_multi_worker_recipe_trains_under_sbatch(slurm, tmp_path):
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--slurm", "--workers=2", "--timeout=300", f"--work_dir={tmp_path}", "--",
      sys.executable, f"{helpers.REPO}/strategies/multi_worker_mirrored.py"), timeout=400,
      env={"SLURM_CONF": slurm.conf})
  assert len(list(tmp_path.glob("tfdist-job-*.sbatch"))) == 1
  assert result.returncode == 0, result.stdout[-3000:]
  assert re.search(r"SLURM job \d+ ended COMPLETED, exit code 0", result.stdout)
  finals = dict(re.findall(r"^(\d): worker:\d (final loss .*)$", result.stdout, re.M))
  assert set(finals) == {"0", "1"}
  assert finals["0"] == finals["1"]  # Synchronous: identical on both SLURM tasks.
  # Both tasks joined: their records reached the launcher, which says nothing.
  assert "No two tasks ever joined" not in result.stdout and "trains alone" not in result.stdout


@pytest.mark.slow
@pytest.mark.slurm
def test_a_parameter_server_job_ends_with_its_chief(slurm, tmp_path):
  # Before: the ps and worker tasks served forever, so the step ran until its
  # time limit after training ended (here: cancelled by --timeout, exit 124).
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--slurm", "--workers=1", "--ps=1", "--timeout=240", f"--work_dir={tmp_path}",
      # 3 tasks on this 2-CPU node: more tasks than CPUs, as SLURM allows when asked.
      "--sbatch=--overcommit", "--", sys.executable, f"{helpers.REPO}/strategies/parameter_server.py"), timeout=400,
      env={"SLURM_CONF": slurm.conf})
  assert result.returncode == 0, result.stdout[-3000:]
  assert "needs a chief to run the program and end the job; added one" in result.stdout
  assert re.search(r"SLURM job \d+ ended COMPLETED, exit code 0", result.stdout)
  # Task 0 is the chief; 1 the ps, 2 the worker: both stop once it is done.
  assert re.search(r"^1: tfdist: the chief at \S+ has finished; ps:0 stops serving", result.stdout,
                   re.M)
  assert re.search(r"^2: tfdist: the chief at \S+ has finished; worker:0 stops serving",
                   result.stdout, re.M)


HOLD_PORT = ("import socket, time; from tfdist.cluster import ClusterSpec; "
             "spec = ClusterSpec.from_env(); address = spec.address(spec.task); "
             "s = socket.create_server(('', int(address.rsplit(':', 1)[1]))); "
             "print('holds', address, flush=True); time.sleep(4)")


@pytest.mark.slow
@pytest.mark.slurm
def test_two_jobs_on_one_node_at_once_get_different_ports(slurm, tmp_path):
  # Before: ports came from the job id, so consecutive jobs with 2 tasks on a
  # node shared one port, and the second to bind it failed.
  with contextlib.ExitStack() as stack:
    processes = []
    for name in ("a", "b"):  # Both submitted before either ends.
      (tmp_path / name).mkdir()
      processes.append(stack.enter_context(helpers.spawned(helpers.tfdist_cli(
          "launch", "--slurm", "--workers=2", "--timeout=120", f"--work_dir={tmp_path / name}",
          "--sbatch=--oversubscribe", "--", sys.executable, "-c", HOLD_PORT),
          env={"SLURM_CONF": slurm.conf})))
    outputs = [(p.communicate(timeout=200)[0], p.returncode) for p in processes]
  assert all(re.search(r"SLURM job \d+ ended COMPLETED", out) for out, _ in outputs)
  overlap = [re.search(r"SLURM job (\d+)", out).group(1) for out, _ in outputs]
  assert overlap[0] != overlap[1]
  held = []
  for output, code in outputs:
    assert code == 0, output[-3000:]
    held.append(set(re.findall(r"holds (\S+)", output)))
  assert len(held[0]) == len(held[1]) == 2
  assert not held[0] & held[1], held


@pytest.mark.slow
@pytest.mark.slurm
def test_a_failing_job_returns_its_exit_code(slurm, tmp_path):
  workdir = tmp_path / "a user's $HOME"  # Quoted wherever the script names it.
  workdir.mkdir()
  (workdir / "tfdist-job.sbatch").symlink_to(tmp_path / "not-followed")  # Once a fixed name.
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--slurm", "--workers=2", "--timeout=120", f"--work_dir={workdir}", "--",
      sys.executable, "-c",
      "import os, socket, sys, time; rank = os.environ['SLURM_PROCID']; print('rank', rank, "
      "'sees', [name for _, name in socket.if_nameindex()], flush=True); "
      # Rank 1 fails once rank 0 has printed (its line is asserted below), within a minute.
      f"ready = {str(tmp_path / 'rank-0-printed')!r}; "
      "open(ready, 'w').close() if rank == '0' else [time.sleep(0.1) for _ in range(600) "
      "if not os.path.exists(ready)]; time.sleep(100 if rank == '0' else 0); sys.exit(3)"),
      timeout=200, env={"SLURM_CONF": slurm.conf})
  # srun stops rank 0 and returns 143 (SIGTERM), the highest code: the launch returns the first.
  assert result.returncode == 3, result.stdout[-3000:]
  assert re.search(r"SLURM job \d+ ended FAILED, exit code 143", result.stdout)
  assert "[tfdist launch] worker:1 failed first, with exit code 3; SLURM then stopped the " \
      "other tasks, and srun's 143 is theirs. The launch exits 3" in result.stdout
  # The launch names the ports every host that reaches the node can reach, and the fix.
  # This cluster reserves ports per step (tests/slurm_cluster.py: MpiParams=ports=).
  assert "[tfdist launch] TensorFlow's servers of this job listen on ports in 30000-30999 " \
      "(SLURM's MpiParams=ports=), and any free port for a tf.data service, if its tasks " \
      "span several nodes (on one node they run in a private network namespace; the job's " \
      "first lines say which), of every interface of its nodes, without authentication" \
      in result.stdout
  assert "Fix: run the nodes on a fabric only the cluster's own hosts reach" in result.stdout
  # The script's copy: a fresh name, readable by its owner only; the old name untouched.
  scripts = list(workdir.glob("tfdist-job-*.sbatch"))
  assert len(scripts) == 1 and stat.S_IMODE(scripts[0].stat().st_mode) == 0o600
  assert not (tmp_path / "not-followed").exists()
  # One node: every task in a private network namespace that has only loopback.
  assert re.search(r"^tfdist: every task is on .*: they run in a private network namespace "
                   r"with only loopback$", result.stdout, re.M), result.stdout[-3000:]
  assert sorted(re.findall(r"^\d: rank (\d) sees \['lo'\]$", result.stdout, re.M)) == ["0", "1"]


def test_job_names_directives_and_paths_stay_on_their_line():
  with pytest.raises(ValueError, match=r"`job_name` must be 1-64 letters, digits, .* "
                     r"Received: job_name='x\\ntouch /tmp/owned'"):
    sbatch.render(["true"], ntasks=1, output="o", job_name="x\ntouch /tmp/owned")
  with pytest.raises(ValueError, match=r"--sbatch \(extra_directives\[1\]\) must be one sbatch "
                     r"option on one line, e.g. --sbatch=--partition=gpu; .* "
                     r"Received: '--partition=gpu\\ncurl evil \| sh'"):
    sbatch.render(["true"], ntasks=1, output="o",
                  extra_directives=["--time=5", "--partition=gpu\ncurl evil | sh"])
  with pytest.raises(ValueError, match=r"must be one sbatch option .* Received: 'partition=gpu'"):
    sbatch.render(["true"], ntasks=1, output="o", extra_directives=["partition=gpu"])
  with pytest.raises(ValueError, match=r"must not hold a newline.* Received: '/w\\nrm -rf ~/o'"):
    sbatch.render(["true"], ntasks=1, output="/w\nrm -rf ~/o")
  script = sbatch.render(["true"], ntasks=1, output="/a b/$x-%j.out", data_workers=1,
                         data_work_dir="/j $y")
  assert "#SBATCH --output='/a b/$x-%j.out'" in script
  assert "--output='/a b/$x-%j.out.dispatcher'" in script and "--work_dir='/j $y'" in script


def test_no_slurm_here_is_a_clear_error(tmp_path):
  result = helpers.run(helpers.tfdist_cli("launch", "--slurm", f"--work_dir={tmp_path}", "--",
                                          "true"), timeout=60, env={"PATH": str(tmp_path)})
  assert result.returncode == 1
  assert "tfdist launch: `sbatch` is not installed here: run on a SLURM login node" \
      in result.stdout


@pytest.mark.parametrize("name, value, match", [
    ("TFDIST_STALL_TIMEOUT", "soon", r"`TFDIST_STALL_TIMEOUT` must be a number of seconds >= 0 "
                                     r".*Received: TFDIST_STALL_TIMEOUT='soon'"),
    ("TFDIST_TRAINS_ALONE", "loud", r"`TFDIST_TRAINS_ALONE` must be one of \['warn', 'error'\]\. "
                                    r"Received: TFDIST_TRAINS_ALONE='loud'")])
def test_what_the_tasks_would_refuse_fails_before_submitting(tmp_path, name, value, match):
  # Before: every task's `tfdist task` would exit 2 with the line, or the launch after the job.
  with pytest.raises(ValueError, match=match):  # No sbatch on this PATH: it is not reached.
    sbatch.submit_and_wait(["true"], ntasks=2, workdir=str(tmp_path),
                           options=launch.LaunchOptions(env={"PATH": str(tmp_path), name: value}))
  assert not os.listdir(tmp_path)


def test_the_script_carries_no_environment(monkeypatch):
  monkeypatch.setenv("WANDB_API_KEY", "s3cr3t-value")
  text = sbatch.render(["python", "train.py"], ntasks=2, output="out.txt")
  assert "s3cr3t" not in text and "WANDB_API_KEY" not in text


def test_the_template_users_read_is_the_one_tfdist_renders():
  import os
  with open(os.path.join(helpers.REPO, "launch", "slurm", "tfdist.sbatch")) as f:
    users_copy = f.read()
  with open(sbatch.TEMPLATE) as f:
    rendered = f.read()
  assert users_copy == rendered, ("launch/slurm/tfdist.sbatch and "
                                  "tfdist/launch/slurm/templates/slurm.sbatch differ: keep them one file")


@pytest.mark.slow
@pytest.mark.slurm
def test_a_tf_data_service_runs_beside_the_training_step(slurm, tmp_path):
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--slurm", "--workers=2", "--data_workers=2", "--timeout=300",
      f"--work_dir={tmp_path}", "--", sys.executable,
      f"{helpers.SCRIPTS}/data_service_train.py", "600"), timeout=400,
      env={"SLURM_CONF": slurm.conf})
  assert result.returncode == 0, result.stdout[-3000:]
  results = {}
  for line in re.findall(r"^\d: RESULT (.*)$", result.stdout, re.M):
    got = json.loads(line)
    results[got["epoch"], got["task"]] = got
  for epoch in (0, 1):  # Split between the two SLURM tasks, each example once.
    assert helpers.read_once(results, epoch) == (600, 600, True)
  fits = re.findall(r"^\d: FIT (.*)$", result.stdout, re.M)
  assert len(fits) == 2 and fits[0] == fits[1] and len(json.loads(fits[0])["loss"]) == 3
  # The servers' own output, beside the job's.
  assert any(name.endswith(".dispatcher") for name in os.listdir(tmp_path))


def test_restarts_need_a_template_with_a_place_for_them(tmp_path):
  template = tmp_path / "old.sbatch"
  template.write_text("#!/bin/bash\n#SBATCH --ntasks=${ntasks}\nsrun ${command}\n")
  with pytest.raises(ValueError, match=r"has no \$\{max_restarts\} field.*Received: "
                     r"max_restarts=2"):
    sbatch.render(["python", "t.py"], ntasks=2, output="o", max_restarts=2,
                  template=str(template))
  assert "up to 2 time(s)" in sbatch.render(["python", "t.py"], ntasks=2, output="o",
                                            max_restarts=2)
  with pytest.raises(ValueError, match=r"`max_restarts` must be an int >= 0. Received: True"):
    sbatch.render(["python", "t.py"], ntasks=2, output="o", max_restarts=True)


def test_data_workers_need_a_template_with_a_place_for_them(tmp_path):
  template = tmp_path / "old.sbatch"
  template.write_text("#!/bin/bash\n#SBATCH --ntasks=${ntasks}\nsrun ${command}\n")
  with pytest.raises(ValueError, match=r"has no \$\{data_service\} line.*Received: "
                     r"data_workers=2"):
    sbatch.render(["python", "t.py"], ntasks=2, output="o", data_workers=2,
                 template=str(template))
  # Without data workers an old template still renders.
  assert f"srun {sys.executable} -m tfdist.launch._task -- python t.py" in sbatch.render(
      ["python", "t.py"], ntasks=2, output="o", template=str(template))


@pytest.mark.slow
@pytest.mark.slurm
def test_a_stalled_task_dumps_its_stacks_says_where_and_the_step_runs_again(slurm, tmp_path):
  # Before: the script ran the command under srun alone, and a stalled job waited for
  # its time limit (here --timeout's 124). Now `tfdist task` watches each task beside
  # it; worker 1 blocks forever in wait_forever after 3 steps in the first attempt, and
  # the step runs again in the allocation (--max_restarts), where both go through.
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--slurm", "--workers=2", "--stall_timeout=2", "--timeout=120",
      "--max_restarts=1", f"--work_dir={tmp_path}", "--",
      *helpers.python(os.path.join(helpers.SCRIPTS, "stall_loop.py"), str(tmp_path))),
      timeout=200, env={"SLURM_CONF": slurm.conf, "TFDIST_GRACE_PERIOD": "2"})
  out = result.stdout
  assert result.returncode == 0, out[-3000:]
  assert "1: tfdist task: worker:1's Python stacks:" in out, out[-3000:]
  assert re.search(r"^1: tfdist task: stalled: no training step completed anywhere for \d+s "
                   r".*; worker:1 is not waiting inside TensorFlow .*: it is in wait_forever \(",
                   out, re.M), out[-3000:]
  # srun reports its highest code: 3, or 143 when it stopped the other task first.
  assert re.search(r"^tfdist: the step ended with exit code (3|143): restart 1 of 1, in this "
                   r"allocation$", out, re.M), out[-3000:]
  assert re.findall(r"^(\d): done$", out, re.M) in (["0", "1"], ["1", "0"]), out[-3000:]
  assert re.search(r"SLURM job \d+ ended COMPLETED, exit code 0$", out, re.M), out[-3000:]
  # The tasks' wrappers kept their rows where the launch reads them: one table at the end.
  assert re.search(r"^\[tfdist launch\] per task, its training steps:\ntask .*\n"
                   r"worker:0 +5 .*\nworker:1 +5 ", out, re.M), out[-3000:]


@pytest.mark.slow
@pytest.mark.slurm
def test_the_chief_names_a_straggler_as_the_job_trains_from_the_rows_the_wrappers_share(
    slurm, tmp_path):
  # Each task has a progress folder of its own here; each wrapper copies its row into the
  # job's records folder once a second, and the chief waits for the rows of the steps it
  # ran there (tfdist.task.progress). Worker 1's input sleeps 0.1 s a batch.
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--slurm", "--workers=2", "--timeout=120", f"--work_dir={tmp_path}", "--",
      *helpers.python(os.path.join(helpers.SCRIPTS, "stall.py"), "slow", str(tmp_path))),
      timeout=200, env={"SLURM_CONF": slurm.conf})
  out = result.stdout
  assert result.returncode == 0, out[-3000:]
  # Rank 0's line, logged as its epoch ended, before the launch's table at the job's end.
  named = re.search(r"^0: tfdist: worker:1 holds the others back, waiting for its input", out,
                    re.M)
  table = out.find("[tfdist launch] per task, its training steps:")
  assert named and 0 <= named.start() < table, out[-3000:]
  assert "markedly slower" not in out, out[-3000:]


MIRRORED = "import tensorflow as tf; tf.distribute.MirroredStrategy()"


@pytest.mark.slow
@pytest.mark.slurm
def test_a_job_in_which_no_two_tasks_joined_a_collective_is_named_at_its_end(slurm, tmp_path):
  # Before: each task said its own line, and the launch ended in silence.
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--slurm", "--workers=2", "--timeout=120", f"--work_dir={tmp_path}", "--",
      *helpers.python("-c", MIRRORED)), timeout=200, env={"SLURM_CONF": slurm.conf})
  out = result.stdout
  assert result.returncode == 0, out[-3000:]  # Warn: the default.
  assert re.search(r"^0: .*This task \(worker:0\) trains alone: MirroredStrategy reads no "
                   r"TF_CONFIG", out, re.M), out[-3000:]
  assert re.search(r"^\[tfdist launch\] No two tasks ever joined a collective: .* none did",
                   out, re.M), out[-3000:]
  assert not list(tmp_path.glob("tfdist-joined-*"))  # The records' folder is gone.
