"""Every task of a cluster on a Ray cluster: `tfdist launch --ray=ADDRESS`.

Ray runs the processes; tfdist builds the TensorFlow cluster and supervises it
as it does locally. The launcher reserves one placement-group bundle per task
(chief, workers, ps, evaluator), asks each bundle's node for its address and a
free port there, builds the `ClusterSpec` and every task's `TF_CONFIG` from
them, and then runs the same supervision as `tfdist launch` on one machine
(`tfdist.launch.supervision`): the restart rules, `--timeout`, `--grace_period`
and the `[worker:1]` prefixes. Each task there is a small local process
(`python -m tfdist.cli.ray_task`) that starts a Ray actor in the task's bundle;
the actor starts the user's command on its node, in its own process group, and
hands its lines and exit code back. Nothing of the job outlives the launcher:

- a task's process dies with its actor (`PR_SET_PDEATHSIG`), its actor with
  the local process that owns it (Ray kills the actors of a dead owner), and
  that process with the launcher (as every local task does);
- the placement group is the launcher's own: Ray removes it, and every actor
  in it, when the launcher's connection ends, even by SIGKILL.

The address resolves as the flag, then `RAY_ADDRESS`, then an error saying how
to name or start a cluster; `--ray=local` starts a Ray cluster on this machine
for the job. Ray is an optional dependency: `pip install 'tfdist[ray]'`.

Ray's own `TensorflowTrainer` (Ray Train) gives each worker a worker-only
`TF_CONFIG` (no chief, parameter servers or evaluator) and forces tf_keras;
here the cluster is whatever `tfdist launch` builds, with either Keras.
"""

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from typing import Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

from tfdist import cluster as cluster_lib
from tfdist.launch import launcher as launcher_lib
from tfdist.launch import local
from tfdist.launch import supervision
from tfdist.launch import task_keras

logger = logging.getLogger("tfdist")

ADDRESS_ENV = "RAY_ADDRESS"
# What `--ray=local` asks for: a Ray cluster started here, for this job only.
LOCAL = "local"
# Ray's namespace for tfdist's placement groups and actors.
NAMESPACE = "tfdist"
# Told to each task's local process: the placement group, and the task -> bundle map.
PLACEMENT_GROUP_ENV = "TFDIST_RAY_PLACEMENT_GROUP"
BUNDLES_ENV = "TFDIST_RAY_BUNDLES"
PLACEMENTS = ("PACK", "SPREAD")
# A task whose actor was lost (its node gone): a failure, restarted as any other.
LOST_EXIT_CODE = 1
# A command that could not start on its node, as a shell says it.
NOT_STARTED_EXIT_CODE = 127
# Seconds to wait for the cluster to have room for every task.
RESERVE_SECONDS = 60.0
# Variables of the launcher's environment a task gets on its node; the rest of
# its environment is the node's own (PATH, CUDA_VISIBLE_DEVICES that Ray sets).
FORWARDED_PREFIXES = ("TF_", "TFDIST_", "KERAS_")
FORWARDED = ("PYTHONPATH", "PYTHONUNBUFFERED")


class RayUnavailable(RuntimeError):
  """Ray is not installed, or no Ray cluster was named or could be reached."""


def import_ray():
  """The `ray` module.

  Raises:
    RayUnavailable: Ray is not installed, naming the extra that installs it.
  """
  try:
    import ray  # pylint: disable=import-outside-toplevel  An optional dependency.
  except ImportError as e:
    raise RayUnavailable(
        "--ray needs Ray: pip install 'tfdist[ray]' (or 'ray>=2.60') on this machine and "
        f"on every node of the cluster. Received: {type(e).__name__}: {e}") from e
  return ray


def resolve_address(address: Optional[str], environ: Optional[Mapping[str, str]] = None) -> str:
  """The Ray cluster to run on: `address`, else `RAY_ADDRESS`; "local" starts one here.

  Raises:
    RayUnavailable: neither is given.
  """
  environ = os.environ if environ is None else environ
  chosen = address or environ.get(ADDRESS_ENV)
  if not chosen:
    raise RayUnavailable(
        "No Ray cluster named: pass --ray=ADDRESS (the head's host:port, e.g. "
        "--ray=10.0.0.5:6379, or --ray=auto for the cluster this machine belongs to), set "
        f"{ADDRESS_ENV}, or pass --ray=local to start a Ray cluster here for this job. "
        f"Received: no address and {ADDRESS_ENV} unset")
  return chosen


def connect(address: str):
  """`ray.init` for the launcher; returns the `ray` module.

  Raises:
    RayUnavailable: Ray is missing, or nothing answers at `address`.
  """
  ray = import_ray()
  options = dict(namespace=NAMESPACE, log_to_driver=False, logging_level=logging.ERROR,
                 configure_logging=False)
  try:
    if address == LOCAL:
      ray.init(include_dashboard=False, **options)
    else:
      ray.init(address=address, **options)
  except (ConnectionError, RuntimeError, ValueError) as e:
    raise RayUnavailable(
        f"Could not reach a Ray cluster at {address!r}: start one (`ray start --head` on "
        "its first node), or pass its head's host:port as --ray=ADDRESS (or in "
        f"{ADDRESS_ENV}). Received: {type(e).__name__}: {str(e).splitlines()[0]}") from e
  return ray


def task_resources(ray, task: cluster_lib.TaskSpec, cpus: float) -> Dict[str, float]:
  """One task's bundle: `cpus` CPUs, and one GPU for a computing task if the cluster has GPUs."""
  resources = {"CPU": float(cpus)}
  computes = task.type in (cluster_lib.CHIEF, cluster_lib.WORKER)
  if computes and ray.cluster_resources().get("GPU", 0) >= 1:
    resources["GPU"] = 1.0
  return resources


def _bundle_options(ray, placement_group, bundle: int, resources: Mapping[str, float]) -> dict:
  from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
  del ray
  return dict(num_cpus=resources.get("CPU", 0), num_gpus=resources.get("GPU", 0),
              scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group, bundle))


def _free_address() -> Tuple[str, int]:
  """(this node's Ray address, a port free on it now)."""
  import ray  # pylint: disable=import-outside-toplevel  Runs on a Ray node.
  host = ray.util.get_node_ip_address()
  with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
    s.bind((host, 0))
    return host, s.getsockname()[1]


def reserve(ray, tasks: Sequence[cluster_lib.TaskSpec], cpus: float, placement: str,
            timeout: float = RESERVE_SECONDS):
  """(the name of a placement group with a bundle per task, the bundles, each task's "host:port").

  The evaluator's address is None: it serves nothing.

  Raises:
    RayUnavailable: the cluster has no room for the bundles within `timeout`.
  """
  from ray.util.placement_group import placement_group, remove_placement_group
  bundles = [task_resources(ray, task, cpus) for task in tasks]
  name = f"tfdist-{uuid.uuid4().hex[:12]}"
  group = placement_group(bundles, strategy=placement, name=name)
  ready, _ = ray.wait([group.ready()], timeout=timeout)
  if not ready:
    remove_placement_group(group)
    raise RayUnavailable(
        f"The Ray cluster has no room for {len(bundles)} tasks ({bundles}, {placement}) "
        f"after {timeout:g}s; it has {ray.available_resources()}. Give it more nodes, or "
        f"fewer CPUs per task (--ray_cpus_per_task). Received: tasks={[str(t) for t in tasks]}")
  return name, bundles, task_addresses(ray, name, tasks, bundles, timeout)


def task_addresses(ray, group_name: str, tasks: Sequence[cluster_lib.TaskSpec],
              bundles: Sequence[Mapping[str, float]],
              timeout: float = RESERVE_SECONDS) -> List[Optional[str]]:
  """Each task's "host:port" now: its bundle's node, and a port free there (None: evaluator).

  Ray moves the bundles of a lost node to others as room allows; this waits
  for that, up to `timeout`.

  Raises:
    RayUnavailable: a bundle found no node within `timeout`.
  """
  from ray.util.placement_group import get_placement_group
  group = get_placement_group(group_name)
  probe = ray.remote(_free_address)
  pending = [probe.options(**_bundle_options(ray, group, i, bundles[i])).remote()
             for i in range(len(tasks))]
  ready, _ = ray.wait(pending, num_returns=len(pending), timeout=timeout)
  if len(ready) < len(pending):
    raise RayUnavailable(
        f"The Ray cluster found no node for {len(pending) - len(ready)} of the job's "
        f"{len(tasks)} tasks within {timeout:g}s (a node was lost and no other has room); "
        f"it has {ray.available_resources()}. Received: bundles={list(bundles)}")
  return [None if task.type == cluster_lib.EVALUATOR else f"{_host(host)}:{port}"
          for task, (host, port) in zip(tasks, ray.get(pending))]


def _host(host: str) -> str:
  return f"[{host}]" if ":" in host else host


def cluster_spec(tasks: Sequence[cluster_lib.TaskSpec],
                 addresses: Sequence[Optional[str]]) -> cluster_lib.ClusterSpec:
  """The `ClusterSpec` of `tasks` at `addresses` (in the same order)."""
  jobs: Dict[str, List[str]] = {}
  for task, address in zip(tasks, addresses):
    if address is not None:
      jobs.setdefault(task.type, []).append(address)
  return cluster_lib.ClusterSpec(
      jobs, has_evaluator=any(t.type == cluster_lib.EVALUATOR for t in tasks))


def forwarded(environ: Mapping[str, str]) -> Dict[str, str]:
  """The variables of `environ` a task takes to its node (TF_CONFIG, tfdist's, Keras's...)."""
  return {k: v for k, v in environ.items() if k.startswith(FORWARDED_PREFIXES) or k in FORWARDED}


class TaskProcess:
  """A Ray actor that runs one task's command on its node and hands back its lines.

  Made by `tfdist.cli.ray_task` (`ray.remote(TaskProcess)`), which polls `read`.
  """

  def __init__(self):
    self._process: Optional[subprocess.Popen] = None
    self._lines: List[str] = []
    self._lock = threading.Lock()

  def start(self, command: Sequence[str], env: Mapping[str, str], cwd: Optional[str]) -> str:
    """Starts `command` with the node's environment plus `env`; returns where it runs."""
    full_env = {**os.environ, **env}
    if cwd is not None and not os.path.isdir(cwd):
      cwd = None  # Not on this node: the worker's own folder (give absolute paths).
    self._process = subprocess.Popen(
        list(command), env=full_env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True,
        preexec_fn=supervision.die_with_parent(os.getpid()))
    threading.Thread(target=self._pump, daemon=True).start()
    import ray  # pylint: disable=import-outside-toplevel  Runs on a Ray node.
    return f"{socket.gethostname()} ({ray.util.get_node_ip_address()}, Ray node " \
           f"{ray.get_runtime_context().get_node_id()[:8]})"

  def _pump(self) -> None:
    for raw in iter(self._process.stdout.readline, b""):
      with self._lock:
        self._lines.append(raw.decode("utf-8", errors="replace").rstrip("\n"))
    self._process.stdout.close()

  def read(self, timeout: float = 0.2) -> Tuple[List[str], Optional[int]]:
    """(lines since the last call, the exit code once it has exited and said everything)."""
    try:
      code = self._process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      code = None
    with self._lock:
      lines, self._lines = self._lines, []
    if code is not None and self._process.stdout is not None and \
        not self._process.stdout.closed:
      code = None  # Lines still coming.
    return lines, code

  def signal(self, signum: int) -> None:
    """Sends `signum` to the task's process group (it and its children)."""
    if self._process is not None:
      supervision.signal_group(self._process, signum)


def run_task(address: str, command: Sequence[str], environ: Mapping[str, str],
             output: TextIO, cwd: Optional[str]) -> int:
  """One task's local end: its actor in its bundle, the lines it prints, its exit code.

  SIGTERM and SIGINT are passed on to the task; the return value is its exit
  code (negative: the signal that killed it).
  """
  ray = import_ray()
  ray.init(address=address, namespace=NAMESPACE, log_to_driver=False,
           logging_level=logging.ERROR, configure_logging=False)
  from ray.util.placement_group import get_placement_group
  task = cluster_lib.TaskSpec(**json.loads(environ["TF_CONFIG"])["task"])
  bundles = json.loads(environ[BUNDLES_ENV])
  index, resources = bundles[str(task)]
  group = get_placement_group(environ[PLACEMENT_GROUP_ENV])
  actor = ray.remote(TaskProcess).options(**_bundle_options(ray, group, index, resources),
                                          max_restarts=0).remote()
  try:
    where = ray.get(actor.start.remote(list(command), forwarded(environ), cwd))
  except ray.exceptions.RayTaskError as e:  # E.g. the program is not on that node.
    output.write(f"tfdist: could not start {task} on its Ray node: "
                 f"{str(e.cause if hasattr(e, 'cause') else e).splitlines()[-1]}. Check that "
                 f"the command exists there. Received: command={list(command)!r}\n")
    output.flush()
    return NOT_STARTED_EXIT_CODE
  output.write(f"tfdist: {task} runs on {where}\n")
  output.flush()
  received: List[int] = []
  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda signum, frame: received.append(signum))
  passed = 0
  while True:
    while passed < len(received):
      actor.signal.remote(received[passed])
      passed += 1
    try:
      lines, code = ray.get(actor.read.remote())
    except ray.exceptions.RayActorError as e:  # Its node, or its worker process, is gone.
      output.write(f"tfdist: {task} was lost with its Ray actor (its node left the cluster, "
                   f"or its worker died): {str(e).splitlines()[0]}\n")
      output.flush()
      return LOST_EXIT_CODE
    for line in lines:
      output.write(line + "\n")
    output.flush()
    if code is not None:
      return code


class RayLauncher(launcher_lib.Launcher):
  """Every task as a process on a node of a Ray cluster, supervised from here."""

  name = "ray"

  def __init__(self, *, address: Optional[str] = None, timeout: Optional[float] = None,
               max_restarts: int = 0, env: Optional[Mapping[str, str]] = None,
               output: Optional[TextIO] = None,
               grace_period: float = local.GRACE_PERIOD_SECONDS,
               keras: Optional[str] = None, cpus_per_task: float = 1.0,
               placement: str = "SPREAD"):
    if placement not in PLACEMENTS:
      raise ValueError(f"`placement` must be one of {list(PLACEMENTS)}. "
                       f"Received: placement={placement!r}")
    if not cpus_per_task > 0:
      raise ValueError(f"`cpus_per_task` must be > 0. Received: cpus_per_task={cpus_per_task!r}")
    self.address, self.timeout, self.max_restarts = address, timeout, max_restarts
    self.env, self.output, self.grace_period = env, output, grace_period
    self.keras, self.cpus_per_task, self.placement = keras, cpus_per_task, placement

  def launch(self, command: Sequence[str], job: launcher_lib.Job) -> int:
    output = self.output or sys.stdout
    if job.data_workers:
      raise ValueError("tfdist launch --ray does not run a tf.data service yet; run its "
                       "servers on the cluster yourself and pass service= to "
                       "tfdist.data.service.distribute. Received: data_workers="
                       f"{job.data_workers}")
    address = resolve_address(self.address, self.env)
    job, note = launcher_lib.with_coordinator(job)
    if note:
      output.write(f"[tfdist launch] {note}\n")
    ray = connect(address)
    try:
      tasks = list(cluster_lib.ClusterSpec.local(
          job.workers, ps=job.ps, chief=job.chief, evaluator=job.evaluator).tasks())
      group, bundles, addresses = reserve(ray, tasks, self.cpus_per_task, self.placement)
      spec = cluster_spec(tasks, addresses)
      output.write(f"[tfdist launch] {spec} on Ray at {address}\n")
      output.flush()
      base = dict(os.environ if self.env is None else self.env)
      env = {**base, **task_keras.variables(self.keras, base),
             PLACEMENT_GROUP_ENV: group,
             BUNDLES_ENV: json.dumps({str(t): [i, bundles[i]] for i, t in enumerate(tasks)}),
             ADDRESS_ENV: ray.get_runtime_context().gcs_address}
      cluster = _Cluster(command, spec, env, output, self.grace_period)
      cluster.prefix = [sys.executable, "-m", "tfdist.cli.ray_task", "--"]
      cluster.addresses = lambda: cluster_spec(tasks, task_addresses(ray, group, tasks, bundles))
      return cluster.run(self.timeout, self.max_restarts)
    finally:
      ray.shutdown()  # The placement group, and any actor left in it, go with it.


class _Cluster(supervision.Cluster):
  """The local supervision, with the addresses asked for again before a restart.

  A restarted task may be on another node (its node was lost, and Ray moved
  its bundle), and its old port may be taken: every task gets a new address.
  """

  addresses = None  # () -> the ClusterSpec at the tasks' addresses now.

  def prepare_attempt(self) -> None:
    if self.attempt and self.addresses is not None:
      self.spec = self.addresses()
      self.report(f"{self.spec} for the restart")
