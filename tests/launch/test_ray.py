"""tfdist.launch.ray._launcher: every task on a real 2-node Ray cluster (loopback only), supervised here.

One Ray cluster (a head and one more node, `tests/ray_cluster.py`) is shared
by the tests of this module; every command runs inside its private network
namespace.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

import helpers
from tfdist import launch
from tfdist.launch.ray import _launcher as ray_launcher
from tfdist.task import _trains_alone as trains_alone

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install '.[ray]'")
import ray_cluster  # pylint: disable=wrong-import-position

SCRIPT = os.path.join(helpers.SCRIPTS, "ray_fit.py")
RUNS_ON = r"^\[(\w+:\d)\] tfdist: \1 runs on .* Ray node (\w+)\)$"


@pytest.fixture(scope="module")
def cluster():
  started = ray_cluster.RayCluster().start()
  try:
    yield started
  finally:
    started.stop()


def _events(stdout):
  """The launcher's lines and where each task ran or was lost: a failed test's story in short.

  A task's lines (Ray's state dumps among them) can fill any tail of the output.
  """
  return "".join(line for line in stdout.splitlines(keepends=True)
                 if line.startswith("[tfdist launch]") or re.search(r"\] tfdist: .* (runs on|"
                                                                     r"was lost)", line))


def _results(stdout):
  return {m.group(1): json.loads(m.group(2))
          for m in re.finditer(r"^\[(\w+:\d)\] RESULT (.*)$", stdout, re.M)}


@pytest.mark.slow
def test_ray_launch_returns_worker_0s_real_result_and_env_keeps_the_token(cluster, tmp_path):
  """A function's result comes back through Ray, not the output: a forged line loads nothing.

  The cluster takes only requests with its token; a launch given its own `env`
  (without the token) still reaches it from every task.
  """
  marker = tmp_path / "unpickled"
  cell = tmp_path / "cell.py"  # What a notebook cell runs (the function needs a source).
  cell.write_text(
      "import os, sys\n"
      "from tfdist import launch\n"
      "def train():\n"
      "  import base64, json, os, pickle\n"
      "  import tfdist\n"
      "  strategy = tfdist.make_strategy('multi_worker_mirrored')\n"
      "  class Payload:  # Unpickling it creates the marker file.\n"
      "    def __reduce__(self):\n"
      f"      return (open, ({str(marker)!r}, 'w'))\n"
      "  print('TFDIST_RESULT', base64.b64encode(pickle.dumps(Payload())).decode(), flush=True)\n"
      "  task = json.loads(os.environ['TF_CONFIG'])['task']\n"
      "  return {'task': task, 'replicas': strategy.num_replicas_in_sync}\n"
      "print('RETURNED', launch.ray_launch(train, workers=2, timeout=200))\n"
      "env = {k: os.environ[k] for k in ('PATH', 'PYTHONPATH', 'RAY_ADDRESS') if k in os.environ}\n"
      "code = launch.make_launcher('ray', launch.LaunchOptions(env=env, timeout=120)).launch(\n"
      "    [sys.executable, '-c', 'print(\"ran\")'], launch.Job(workers=1))\n"
      "print('WITH ENV', code)\n")
  result = cluster.run(helpers.python(str(cell)), timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  assert "RETURNED {'task': {'type': 'worker', 'index': 0}, 'replicas': 2}" in result.stdout
  assert not marker.exists()
  assert "[worker:0] TFDIST_RESULT " in result.stdout  # Passed on as text.
  # The function launch's two tasks (the launch with its own env after it runs one more).
  launched = result.stdout.partition("RETURNED")[0]
  assert len(set(re.findall(RUNS_ON, launched, re.M))) == 2
  assert re.search(r"^\[tfdist launch\] TensorFlow's servers of this job listen on ports? "
                   r"[\d, -]+ of every interface of its nodes, without authentication: .*Fix: "
                   r"keep the Ray nodes on a network only they reach", result.stdout, re.M)
  assert "[worker:0] ran" in result.stdout and "WITH ENV 0" in result.stdout, \
      result.stdout[-3000:]


@pytest.mark.slow
def test_a_chief_a_worker_and_a_ps_train_with_fit_and_a_keras3_script_trains(cluster):
  result = cluster.run(helpers.tfdist_cli(
      "launch", "--ray", "--chief", "--workers=1", "--ps=1", "--timeout=240", "--",
      *helpers.python(SCRIPT, "tf_keras", "parameter_server")), timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  assert sorted(dict(re.findall(RUNS_ON, result.stdout, re.M))) == ["chief:0", "ps:0",
                                                                    "worker:0"]
  losses = _results(result.stdout)["chief:0"]["losses"]
  assert losses[-1] < losses[0], losses
  # Keras 3 under multi-worker mirrored: the task site the local launcher uses.
  result = cluster.run(helpers.tfdist_cli(
      "launch", "--ray", "--workers=2", "--keras=keras3", "--timeout=240", "--",
      *helpers.python(SCRIPT, "keras3", "multi_worker_mirrored")), timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  results = _results(result.stdout)
  assert results["worker:0"]["weights"] == results["worker:1"]["weights"]
  # Both joined: their records came back from their nodes, and the launcher says nothing.
  assert "No two tasks ever joined" not in result.stdout and "trains alone" not in result.stdout
  # Each task's row of step times came back with its actor: one table at the end.
  assert re.search(r"^\[tfdist launch\] per task, its training steps:\ntask .*\n"
                   r"worker:0 +\d+ .*\nworker:1 +\d+ ", result.stdout, re.M), result.stdout[-3000:]


@pytest.mark.slow
def test_two_workers_on_two_nodes_read_every_element_once_through_a_tf_data_service(cluster):
  # Each worker takes a node's one trainer_slot: one per node.
  result = cluster.run(helpers.tfdist_cli(
      "launch", "--ray", "--workers=2", "--data_workers=1", "--timeout=240",
      "--ray_resources=worker:trainer_slot=1", "--",
      *helpers.python(os.path.join(helpers.SCRIPTS, "data_service_train.py"), "400")),
      timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  assert f"on Ray at {cluster.address}" in result.stdout
  nodes = dict(re.findall(RUNS_ON, result.stdout, re.M))
  assert len({nodes["worker:0"], nodes["worker:1"]}) == 2, nodes
  assert re.search(r"^\[tfdist launch\] tf.data service: dispatcher 127.0.0.1:\d+, 1 data "
                   r"worker\(s\)$", result.stdout, re.M), result.stdout[-3000:]
  # The servers ran as Ray actors too, the data worker registered at its node's address.
  servers = re.findall(r"^\[(dispatcher:0|data_worker:0)\] tfdist: \1 runs on .* Ray node",
                       result.stdout, re.M)
  assert sorted(servers) == ["data_worker:0", "dispatcher:0"], result.stdout[-3000:]
  results = {}
  for line in re.findall(r"^\[worker:\d\] RESULT (.*)$", result.stdout, re.M):
    results[json.loads(line)["epoch"], json.loads(line)["task"]] = json.loads(line)
  assert helpers.read_once(results, 0) == (400, 400, True)
  assert helpers.read_once(results, 1) == (400, 400, True)
  fits = re.findall(r"^\[worker:\d\] FIT (.*)$", result.stdout, re.M)
  assert len(fits) == 2 and fits[0] == fits[1]  # In sync: the same losses and weights.
  assert json.loads(fits[0])["loss"][-1] < json.loads(fits[0])["loss"][0]


@pytest.mark.slow
def test_sigterm_to_the_launcher_reaches_every_task_which_backs_up_in_its_grace_period(
    cluster, tmp_path):
  command = cluster.command(helpers.tfdist_cli(
      "launch", "--ray", "--workers=2", "--grace_period=20", "--timeout=240", "--",
      *helpers.python(SCRIPT, "tf_keras", "multi_worker_mirrored", f"backup={tmp_path}")))
  lines = []
  with helpers.spawned(command, env=cluster.env) as process:
    for line in process.stdout:
      lines.append(line)
      if line.startswith("[worker:1] EPOCH 2"):
        os.kill(helpers.command_pid(process.pid, "tfdist launch"), signal.SIGTERM)  # As a scheduler.
        break
    lines += process.communicate(timeout=120)[0].splitlines(keepends=True)
  stdout = "".join(lines)
  assert process.returncode == 128 + signal.SIGTERM, stdout[-3000:]
  # Rehearsal ci10 missed it once, with exit code 143 all the same: the SIGTERM had gone to
  # a task's local end (`python -m tfdist.launch.ray._task` holds "launch" too, and after
  # the pids wrapped around it came first), which passed it on to its task alone.
  assert "received SIGTERM; stopping every task" in stdout, stdout[-3000:]
  saved = re.findall(r"^\[(worker:\d)\] BackupAndRestore: SIGTERM: backed up epoch (\d+) after "
                     r"(batch \d+|its last batch)", stdout, re.M)
  assert sorted(w for w, *_ in saved) == ["worker:0", "worker:1"], stdout[-3000:]
  assert saved[0][1:] == saved[1][1:], saved  # At the same step.


@pytest.mark.slow
def test_a_lost_node_leaves_min_workers_to_go_on_from_the_backup_and_the_job_grows_back(
    cluster, tmp_path):
  """Each worker takes a node's one trainer_slot: a lost node leaves room for one worker.

  The job goes on with one (--min_workers=1) from its backup; when a node is
  added again, every task backs up on SIGTERM and the job ends on two.
  """
  lines, removed, shrunk, added = [], False, False, False
  with helpers.spawned(cluster.command(helpers.tfdist_cli(
      "launch", "--ray", "--workers=2", "--max_restarts=1", "--min_workers=1",
      "--rescale_timeout=5", "--ray_resources=worker:trainer_slot=1,memory=64Mi", "--grace_period=5",
      "--timeout=240", "--", *helpers.python(SCRIPT, "tf_keras", "multi_worker_mirrored",
                                             f"backup={tmp_path}", "epochs=10"))),
                       env=cluster.env) as process:
    try:
      for line in process.stdout:
        lines.append(line)
        if not removed and line.startswith("[worker:0] EPOCH 2"):
          cluster.remove_node()  # One worker's node: its actor, and its task, are gone.
          removed = True
        elif shrunk and line.startswith("[worker:0] EPOCH"):
          cluster.add_node()  # The shrunk job trains: capacity comes back.
          added = True
          break
        shrunk = shrunk or "going on with 1" in line
      lines += process.communicate(timeout=240)[0].splitlines(keepends=True)
    finally:
      if not added:
        cluster.add_node()  # As it was, for the tests after this one.
  stdout = "".join(lines)
  assert process.returncode == 0, _events(stdout) + stdout[-2000:]
  # Both workers from the start: a slow probe once began the job on one (CHANGELOG, Fixed).
  assert re.search(r"^\[tfdist launch\] ClusterSpec\(worker=\['[\d.:]+', '[\d.:]+'\]\) on Ray ",
                   stdout, re.M), _events(stdout)
  assert re.search(r"tfdist: worker:\d was lost with its Ray actor", stdout), _events(stdout)
  assert "restarting every task (0 restarts left)" in stdout
  shrunk = stdout[stdout.index("for the restart"):]
  assert ": only 1 of the 2 workers found room within 5s; going on with 1 (--min_workers=1) " \
      "from the backup, and back to 2 when the cluster has room" in shrunk, _events(stdout)
  grown = shrunk[shrunk.index("the Ray cluster has room for all 2 workers again (running on 1)"):]
  shrunk = shrunk[:len(shrunk) - len(grown)]
  # On one worker: its TF_CONFIG names one, and it resumed from the two workers' backup.
  assert sorted(dict(re.findall(RUNS_ON, shrunk, re.M))) == ["worker:0"], _events(stdout)
  assert re.search(r"^\[worker:0\] BackupAndRestore: resuming after epoch \d", shrunk, re.M)
  # Grown back: the one worker backed up on SIGTERM, two resumed from it on two nodes.
  assert re.search(r"^\[worker:0\] BackupAndRestore: SIGTERM: backed up epoch", grown, re.M), \
      _events(stdout)
  assert len({node for _, node in re.findall(RUNS_ON, grown, re.M)}) == 2, _events(stdout)
  assert len(re.findall(r"BackupAndRestore: resuming after epoch \d", grown)) == 2
  results = _results(grown)
  assert [results[w]["workers"] for w in ("worker:0", "worker:1")] == [2, 2]
  assert results["worker:0"]["weights"] == results["worker:1"]["weights"]
  assert "restarts left" not in grown  # Growing back is no failure.


@pytest.mark.slow
def test_a_task_whose_node_was_lost_has_moved_one_on_a_live_node_has_not(cluster, tmp_path):
  """What keeps a parameter-server worker or the dispatcher from restarting alone elsewhere."""
  script = tmp_path / "placement.py"
  script.write_text(
      "import sys, time, ray\n"
      "from tfdist.cluster import TaskSpec\n"
      "from tfdist.launch.ray import _placement as ray_placement\n"
      "ray.init(namespace='tfdist', logging_level='ERROR')\n"
      "tasks = [TaskSpec('chief', 0), TaskSpec('worker', 0), TaskSpec('ps', 0)]\n"
      "placed = ray_placement.reserve(ray, tasks, 0.1, 'SPREAD', resources={\n"
      "    'worker': {'removable': 1}, 'chief': {'node:__internal_head__': 0.01}})\n"
      "print('MOVED', placed.moved(TaskSpec('worker', 0)), flush=True)\n"
      "print('PLACED', flush=True)\n"
      "deadline = time.monotonic() + 60\n"
      "while not placed.moved(TaskSpec('worker', 0)) and time.monotonic() < deadline:\n"
      "  time.sleep(0.5)\n"
      "print('MOVED', placed.moved(TaskSpec('worker', 0)), flush=True)\n"
      "print('MOVED', placed.moved(TaskSpec('chief', 0)), flush=True)\n")
  lines = []
  with helpers.spawned(cluster.command(helpers.python(str(script))),
                       env=cluster.env) as process:
    try:
      for line in process.stdout:
        lines.append(line)
        if line.startswith("PLACED"):
          cluster.remove_node()  # The only node with a "removable": the worker's.
          break
      lines += process.communicate(timeout=120)[0].splitlines(keepends=True)
    finally:
      cluster.add_node()
  moved = [line.split(" ", 1)[1].strip() for line in lines if line.startswith("MOVED")]
  assert moved[0] == "None" and moved[2] == "None", lines  # Chief: on the head, still there.
  assert re.fullmatch(r"its node left the Ray cluster, and the others know it at "
                      r"127.0.0.1:\d+", moved[1]), lines


@pytest.mark.slow
def test_a_bundle_whose_probe_is_late_on_its_node_is_waited_for_not_dropped(cluster, tmp_path):
  """A busy node is no lost node: --min_workers shrinks a job only for bundles without a node.

  Before, a probe later than --rescale_timeout shrank the job (a loaded CI run
  began a job of 2 workers on 1; a probe waits for a Ray worker process to
  start). Here an actor
  holds bundle 1 (as the last attempt's actor may): with a short `timeout` the
  job goes on with 2 of 3; once the actor is gone, all 3 are placed.
  """
  script = tmp_path / "late.py"
  script.write_text(
      "import ray\n"
      "from ray.util.placement_group import get_placement_group\n"
      "from tfdist.cluster import TaskSpec\n"
      "from tfdist.launch.ray import _placement as ray_placement\n"
      "ray.init(namespace='tfdist', logging_level='ERROR')\n"
      "tasks = [TaskSpec('worker', i) for i in range(3)]\n"
      "placed = ray_placement.reserve(ray, tasks, 0.1, 'SPREAD', min_workers=1,\n"
      "                               rescale_timeout=0.5)\n"
      "class Holder:\n"
      "  def leave_after(self, seconds):\n"
      "    import time; time.sleep(seconds); ray.actor.exit_actor()\n"
      "holder = ray.remote(Holder).options(**ray_placement.bundle_options(\n"
      "    get_placement_group(placed.group), 1, placed.resources[1])).remote()\n"
      "ray.get(holder.__ray_ready__.remote())  # Bundle 1's CPU is taken from now on.\n"
      "print('HELD', repr(placed.place(timeout=3)), placed.spec(), flush=True)\n"
      "holder.leave_after.remote(2)\n"
      "print('LEFT', repr(placed.place()), placed.spec(), flush=True)\n")
  result = cluster.run(helpers.python(str(script)), timeout=180)
  assert result.returncode == 0, result.stdout[-3000:]
  held, left = (re.search(rf"^{word} (.*)$", result.stdout, re.M).group(1)
                for word in ("HELD", "LEFT"))
  assert held.startswith("'only 2 of the 3 workers found room within 0.5s; going on with 2 "
                         "(--min_workers=1)"), result.stdout[-3000:]
  assert held.count("127.0.0.1:") == 2, held
  assert left.startswith("'' ClusterSpec(worker=["), result.stdout[-3000:]
  assert len(set(re.findall(r"127\.0\.0\.1:\d+", left))) == 3, left


@pytest.mark.parametrize("min_workers, max_restarts, job, match", [
    (1, 1, launch.Job(workers=2, ps=1),
     r"--min_workers is for collective jobs.*Received: min_workers=1, ps=1$"),
    (3, 1, launch.Job(workers=2),
     r"--min_workers must be at most --workers. Received: min_workers=3, workers=2$"),
    (1, 0, launch.Job(workers=2),
     r"give --max_restarts >= 1 too. Received: min_workers=1, max_restarts=0$"),
])
def test_min_workers_is_refused_where_it_cannot_work(min_workers, max_restarts, job, match):
  with pytest.raises(ValueError, match=match):
    launch.make_launcher("ray", launch.LaunchOptions(max_restarts=max_restarts),
                         address="127.0.0.1:1", min_workers=min_workers).launch(["true"], job)


@pytest.mark.parametrize("engine", [[], ["--slurm"]])
def test_min_workers_without_ray_is_a_one_line_error(engine):
  # Before: with --slurm it was ignored without a word.
  result = helpers.run(helpers.tfdist_cli("launch", *engine, "--min_workers=1", "--", "true"),
                       timeout=120)
  assert result.returncode == 2, result.stdout
  assert result.stdout.strip().splitlines()[-1] == (
      "tfdist launch: --min_workers needs --ray: only a Ray cluster can place the workers "
      "elsewhere and grow the job back. Received: --min_workers=1 without --ray")


def test_resources_per_task_type_parse_with_suffixes_and_bad_ones_name_the_form():
  assert ray_launcher.parse_resources(["worker:GPU=2,memory=8Gi", "ps:CPU=4", "worker:tpu=0.5",
                                     "chief:memory=1.5G"]) == {
      "worker": {"GPU": 2.0, "memory": 8 * 2.0**30, "tpu": 0.5}, "ps": {"CPU": 4.0},
      "chief": {"memory": 1.5e9}}
  for bad in ("gpu:GPU=1", "worker:GPU", "worker:GPU=-1", "worker:", "worker:GPU=two"):
    with pytest.raises(ValueError, match=r"must be TYPE:NAME=AMOUNT.*Received: " + re.escape(
        repr(bad)) + "$"):
      ray_launcher.parse_resources([bad])


@pytest.mark.slow
def test_a_sigkilled_launcher_leaves_no_actor_no_process_and_no_folder(cluster, tmp_path):
  marker = str(tmp_path / "sleeping")  # In every task's command line, to look for.
  temporary = tmp_path / "tmp"  # The launcher's: its records' folder must go with it.
  temporary.mkdir()
  with helpers.spawned(cluster.command(helpers.tfdist_cli(
      "launch", "--ray", "--workers=2", "--", *helpers.python(
          SCRIPT, "tf_keras", "multi_worker_mirrored", "sleep=300", marker))),
                       env={**cluster.env, "TMPDIR": str(temporary)}) as process:
    ready = 0
    for line in process.stdout:
      ready += "] READY" in line
      if ready == 2:
        break
    assert ready == 2, "the tasks did not start"
    # The launcher; each task's local process, and on its node the task wrapper
    # (`tfdist.launch._task`, which watches it for stalls) and its command.
    assert len(_pids_with(marker)) == 7, _pids_with(marker)
    assert "ALIVE 2" in cluster.run(helpers.python("-c", _ALIVE_ACTORS), timeout=120).stdout
    assert [p.name.rsplit("-", 1)[0] for p in temporary.iterdir()] == ["tfdist-joined"]
    launcher = helpers.command_pid(process.pid, "tfdist launch")
    os.kill(launcher, signal.SIGKILL)
    process.communicate(timeout=60)
  deadline = time.monotonic() + 60
  while (_pids_with(marker) or os.listdir(temporary)) and time.monotonic() < deadline:
    time.sleep(0.5)
  assert not _pids_with(marker)
  assert not os.listdir(temporary)
  alive = cluster.run(helpers.python("-c", _ALIVE_ACTORS), timeout=120)
  assert alive.returncode == 0, alive.stdout[-2000:]
  deadline = time.monotonic() + 60
  while "ALIVE 0" not in alive.stdout and time.monotonic() < deadline:
    time.sleep(2)
    alive = cluster.run(helpers.python("-c", _ALIVE_ACTORS), timeout=120)
  assert "ALIVE 0" in alive.stdout, alive.stdout[-2000:]


# Ray's own view of the actors (its GCS), without the dashboard the state API needs.
_ALIVE_ACTORS = """
import ray
from ray._private import state
ray.init(logging_level="ERROR")
actors = state.actors().values()
print("ALIVE", sum(a["State"] == "ALIVE" for a in actors), flush=True)
"""


def _pids_with(needle: str):
  found = []
  for name in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{name}/cmdline", "rb") as f:
        if needle.encode() in f.read():
          found.append(int(name))
    except OSError:
      pass
  return found


@pytest.mark.slow
def test_a_command_missing_on_its_node_is_exit_127_naming_it(cluster):
  result = cluster.run(helpers.tfdist_cli("launch", "--ray", "--workers=1", "--",
                                          "/nonexistent/train"), timeout=120)
  assert result.returncode == 127, result.stdout[-3000:]
  assert re.search(r"^\[worker:0\] tfdist: could not start worker:0 on its Ray node: .*"
                   r"No such file or directory.*Received: command=\['/nonexistent/train'\]$",
                   result.stdout, re.M), result.stdout[-3000:]


def test_no_address_and_no_ray_are_one_line_errors():
  command = helpers.tfdist_cli("launch", "--ray", "--", sys.executable, "-c", "pass")
  result = helpers.run(command, timeout=120, env={"RAY_ADDRESS": ""})
  assert result.returncode == 2, result.stdout
  assert result.stdout.strip().splitlines()[-1] == (
      "tfdist launch: No Ray cluster named: pass --ray=ADDRESS (the head's host:port, e.g. "
      "--ray=10.0.0.5:6379, or --ray=auto for the cluster this machine belongs to), set "
      "RAY_ADDRESS, or pass --ray=local to start a Ray cluster here for this job. Received: "
      "no address and RAY_ADDRESS unset")
  # A wrong address: nothing answers there. Ray itself retries for minutes.
  result = helpers.run(helpers.tfdist_cli("launch", "--ray=127.0.0.1:1", "--", sys.executable,
                                          "-c", "pass"), timeout=60)
  assert result.returncode == 2, result.stdout
  assert result.stdout.strip().splitlines()[-1].startswith(
      "tfdist launch: Nothing answers at '127.0.0.1:1' (Connection refused): start the Ray "
      "cluster (`ray start --head` on its first node), or pass its head's host:port")
  # Without Ray installed (hidden from this one process).
  hide = ("import sys; sys.modules['ray'] = None; sys.argv = ['tfdist'] + sys.argv[1:]; "
          "from tfdist.cli import main; main.run()")
  result = helpers.run(helpers.python("-c", hide, "launch", "--ray=127.0.0.1:1", "--",
                                      sys.executable, "-c", "pass"), timeout=120)
  assert result.returncode == 2, result.stdout
  assert result.stdout.strip().splitlines()[-1].startswith(
      "tfdist launch: --ray needs Ray: pip install 'ray>=2.60' (tfdist's `ray` extra)")


@pytest.mark.slow
def test_a_stalled_task_on_its_ray_node_dumps_its_stacks_and_the_job_ends(cluster, tmp_path):
  # Each task's `tfdist task` wrapper watches it on its node; worker 1 blocks after 3 steps.
  result = cluster.run(helpers.tfdist_cli(
      "launch", "--ray", "--workers=2", "--stall_timeout=2", "--grace_period=2", "--",
      *helpers.python(os.path.join(helpers.SCRIPTS, "stall_loop.py"), str(tmp_path))),
      timeout=120)
  assert result.returncode == 3, result.stdout[-3000:]
  assert re.search(r"^\[worker:1\] tfdist task: stalled: no training step completed anywhere "
                   r"for \d+s .*; worker:1 is not waiting inside TensorFlow .*: it is in "
                   r"wait_forever \(", result.stdout, re.M), result.stdout[-3000:]


@pytest.mark.slow
def test_a_straggler_on_its_ray_node_is_named_while_the_job_trains(cluster, tmp_path):
  # Worker 1's input sleeps 0.1 s a batch. The nodes share no folder for a chief to read
  # the other's row: the launcher names the straggler from the rows the actors send it.
  result = cluster.run(helpers.tfdist_cli(
      "launch", "--ray", "--workers=2", "--timeout=240", "--",
      *helpers.python(os.path.join(helpers.SCRIPTS, "stall.py"), "slow_long", str(tmp_path))),
      timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  named = re.search(r"^\[tfdist launch\] worker:1 holds the others back, waiting for its "
                    r"input \(\d+% of its steps; ", result.stdout, re.M)
  assert named, result.stdout[-3000:]
  assert len(re.findall(r"^\[tfdist launch\] worker:1 holds", result.stdout, re.M)) == 1
  assert named.start() < result.stdout.index("] final weights"), result.stdout[-3000:]


def test_a_straggler_is_named_once_until_another_task_is():
  from tfdist.task import _step_times as step_times

  def rows(slow):
    return [step_times.summarize(task, 20, [0.3 if task == slow else 0.1] * 20)
            for task in ("worker:0", "worker:1")]

  line, named = ray_launcher.newly_named(rows("worker:1"), None)
  assert line.startswith("worker:1 is markedly slower") and named == "worker:1"
  assert ray_launcher.newly_named(rows("worker:1"), named) == (None, "worker:1")
  # Near the threshold a task drops out and comes back: it is not named again.
  assert ray_launcher.newly_named(rows(None), named) == (None, "worker:1")
  assert ray_launcher.newly_named(rows("worker:1"), named) == (None, "worker:1")
  line, named = ray_launcher.newly_named(rows("worker:0"), named)
  assert line.startswith("worker:0 is markedly slower") and named == "worker:0"


def test_the_launchers_straggler_thread_ends_when_the_job_does(tmp_path):
  reports, done = [], threading.Event()
  watcher = threading.Thread(target=ray_launcher.name_stragglers,
                             args=(str(tmp_path / "gone"), done, reports.append, 0.01))
  watcher.start()
  time.sleep(0.1)
  done.set()
  watcher.join(timeout=10)
  assert not watcher.is_alive() and reports == []


@pytest.mark.slow
def test_a_job_in_which_no_two_tasks_joined_a_collective_is_named_at_its_end(cluster):
  # Before: each task said its own line, and the launch ended in silence. The tasks'
  # records come back from their nodes through their actors.
  result = cluster.run(helpers.tfdist_cli(
      "launch", "--ray", "--workers=2", "--timeout=120", "--",
      *helpers.python("-c", "import tensorflow as tf; tf.distribute.MirroredStrategy()")),
      timeout=200)
  out = result.stdout
  assert result.returncode == 0, out[-3000:]  # Warn: the default.
  assert re.search(r"^\[worker:1\] .*This task \(worker:1\) trains alone: MirroredStrategy reads "
                   r"no TF_CONFIG", out, re.M), out[-3000:]
  assert re.search(r"^\[tfdist launch\] No two tasks ever joined a collective: .* none did",
                   out, re.M), out[-3000:]


class _LostActor:
  """An actor whose every call comes back as Ray's word that the actor was lost."""

  def __getattr__(self, name):
    return type("Method", (), {"remote": staticmethod(lambda *args: name)})()


def test_an_actor_lost_after_its_task_exited_keeps_the_tasks_exit_code(tmp_path):
  # Before: the records' ray.get raised out of run_task, a traceback instead of code 3.
  def lost(reference):
    raise ray.exceptions.RayActorError(error_msg=f"The actor died before {reference} returned.")
  out = tmp_path / "out"
  env = {trains_alone.JOINED_DIR_ENV: str(tmp_path)}
  with open(out, "w") as output:
    assert ray_launcher.hand_back(lost, _LostActor(), "worker:1", 3, env, output,
                                 str(tmp_path / "result")) == 3
  assert out.read_text() == ("tfdist: worker:1 exited with code 3, then its Ray actor was lost "
                             "before handing back its result and records: The actor died before "
                             "result returned.\n")


def test_a_task_actor_hands_back_a_redrawn_line_while_its_task_still_runs(tmp_path):
  # Keras's bar redraws one line with `\r` until the epoch ends (a state is whole once the
  # next `\r` comes). Before, the actor read lines up to `\n` and handed back nothing of
  # the bar until then.
  release = tmp_path / "release"
  code = ("import os, sys, time\n"
          "os.write(1, b'start\\n\\rstep 1/9\\rstep 2/9')\n"
          f"while not os.path.exists({str(release)!r}): time.sleep(0.05)\n"
          "os.write(1, b'\\rstep 9/9\\n')\n")
  actor = ray_launcher.TaskProcess()
  actor._process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL)
  try:
    threading.Thread(target=actor._pump, daemon=True).start()
    seen, deadline = [], time.monotonic() + 60
    while "step 1/9" not in seen and time.monotonic() < deadline:
      lines, code_now = actor.read(timeout=0.1)
      seen += lines
      assert code_now is None  # The task is still running, waiting for its release.
    assert seen == ["start", "step 1/9"]
    release.touch()
    while time.monotonic() < deadline:
      lines, exit_code = actor.read(timeout=0.1)
      seen += lines
      if exit_code is not None:
        break
    # Under load 5 s can pass before the release: "step 2/9" may be passed on too.
    assert exit_code == 0 and seen[:2] == ["start", "step 1/9"] and seen[-1] == "step 9/9", seen
  finally:
    actor._process.kill()
    actor._process.wait(timeout=30)
