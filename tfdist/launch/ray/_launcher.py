"""Every task of a cluster on a Ray cluster: `tfdist launch --ray=ADDRESS`.

Ray runs the processes; tfdist builds the TensorFlow cluster and supervises it
as it does locally. The launcher reserves one placement-group bundle per task
(chief, workers, ps, evaluator, and the tf.data service's servers), asks each
bundle's node for its address and a free port there
(`tfdist.launch.ray._placement`), builds the `ClusterSpec` and every task's
`TF_CONFIG` from them, and then runs the same supervision as `tfdist launch` on one machine
(`tfdist.launch._supervision`): the restart rules, `--timeout`, `--grace_period`
and the `[worker:1]` prefixes. Each task there is a small local process
(`python -m tfdist.launch.ray._task`) that starts a Ray actor in the task's bundle;
the actor starts the user's command on its node, in its own process group, and
hands its lines and exit code back. Nothing of the job outlives the launcher:

- a task's process dies with its actor (`PR_SET_PDEATHSIG`), its actor with
  the local process that owns it (Ray kills the actors of a dead owner), and
  that process with the launcher (as every local task does);
- the placement group is the launcher's own: Ray removes it, and every actor
  in it, when the launcher's connection ends, even by SIGKILL.

The address resolves as the flag, then `RAY_ADDRESS`, then an error saying how
to name or start a cluster; `--ray=local` starts a Ray cluster on this machine
for the job. Ray is an optional dependency: in a clone of tfdist, `pip install '.[ray]'`.

Ray's own `TensorflowTrainer` (Ray Train) gives each worker a worker-only
`TF_CONFIG` (no chief, parameter servers or evaluator) and forces tf_keras;
here the cluster is whatever `tfdist launch` builds, with either Keras.
"""

import contextlib
import errno
import json
import logging
import os
import signal
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

from tfdist import _folders as folders
from tfdist.task import _step_times as step_times
from tfdist import _variables as variables
from tfdist import cluster as cluster_lib
from tfdist.cluster import _data_service as data_service_lib
from tfdist.cluster import _elastic as elastic
from tfdist.launch import _data_servers as data_servers
from tfdist.launch import _exposure as exposure
from tfdist.launch import _launcher as launcher_lib
from tfdist.launch.ray import _placement as ray_placement
from tfdist.task import _result_channel as result_channel
from tfdist.launch import _supervision as supervision
from tfdist.task import _trains_alone as trains_alone
from tfdist.launch import watchdog
# Public here, where users of the launcher look; defined beside the placement.
from tfdist.launch.ray._placement import RayUnavailable, parse_resources

logger = logging.getLogger("tfdist")

ADDRESS_ENV = "RAY_ADDRESS"
# What `--ray=local` asks for: a Ray cluster started here, for this job only.
LOCAL = "local"
# Ray's namespace for tfdist's placement groups and actors.
NAMESPACE = "tfdist"
# Told to each task's local process: the placement group, and the task -> bundle map.
PLACEMENT_GROUP_ENV = variables.RAY_PLACEMENT_GROUP
BUNDLES_ENV = variables.RAY_BUNDLES
TASK_ENV = variables.RAY_TASK  # Which of them this is: "worker:1", "dispatcher:0".
PLACEMENTS = ("PACK", "SPREAD")
# A task whose actor was lost (its node gone): a failure, restarted as any other.
LOST_EXIT_CODE = 1
# A command that could not start on its node, as a shell says it.
NOT_STARTED_EXIT_CODE = 127
# Seconds to wait for a TCP answer from the Ray cluster's head before Ray
# itself tries (which goes on for minutes against a wrong address).
ANSWER_SECONDS = 10.0
# Seconds between two looks at whether a shrunk job's workers have room again.
GROW_CHECK_SECONDS = 2.0
# Seconds between two copies of each task's row of step times from its node to the
# launcher, and between two looks there for a straggler while the job trains.
ROWS_SECONDS = 2.0
# Variables of the launcher's environment a task gets on its node; the rest of
# its environment is the node's own (PATH, CUDA_VISIBLE_DEVICES that Ray sets).
FORWARDED_PREFIXES = ("TF_", "TFDIST_", "KERAS_")
FORWARDED = ("PYTHONPATH", "PYTHONUNBUFFERED")
# Ray's token authentication (Ray >= 2.52): each task's local process connects
# to the cluster as the launcher did, so it keeps these even when `env` is given.
AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def import_ray():
  """The `ray` module.

  Raises:
    RayUnavailable: Ray is not installed, naming the extra that installs it.
  """
  try:
    import ray  # pylint: disable=import-outside-toplevel  An optional dependency.
  except ImportError as e:
    raise RayUnavailable(
        "--ray needs Ray: pip install 'ray>=2.60' (tfdist's `ray` extra) on this machine and "
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


def check_answers(address: str, timeout: float = ANSWER_SECONDS) -> None:
  """Raises RayUnavailable unless something accepts a TCP connection at `address`.

  "auto" and "local" are Ray's to resolve; "ray://host:port" (Ray Client) is
  checked at host:port.
  """
  if address in ("auto", LOCAL):
    return
  host, _, port = address.split("://", 1)[-1].rpartition(":")
  if not host or not port.isdigit():
    raise RayUnavailable(f"--ray must be the head's host:port (e.g. 10.0.0.5:6379), 'auto' or "
                         f"'local'. Received: {address!r}")
  try:
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
      pass
  except OSError as e:
    raise RayUnavailable(
        f"Nothing answers at {address!r} ({e.strerror or type(e).__name__}): start the Ray "
        f"cluster (`ray start --head` on its first node), or pass its head's host:port as "
        f"--ray=ADDRESS (or in {ADDRESS_ENV}). Received: {address!r}") from None


def connect(address: str):
  """`ray.init` for the launcher; returns the `ray` module.

  Raises:
    RayUnavailable: Ray is missing, or nothing answers at `address`.
  """
  ray = import_ray()
  check_answers(address)
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


def with_auth(env: Mapping[str, str],
              environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
  """`env` plus Ray's authentication settings of `environ` (default os.environ) it lacks."""
  environ = os.environ if environ is None else environ
  return {**{k: environ[k] for k in AUTH_VARIABLES if k in environ}, **env}


def forwarded(environ: Mapping[str, str]) -> Dict[str, str]:
  """The variables of `environ` a task takes to its node (TF_CONFIG, tfdist's, Keras's...)."""
  return {k: v for k, v in environ.items() if k.startswith(FORWARDED_PREFIXES) or k in FORWARDED}


class TaskProcess:
  """A Ray actor that runs one task's command on its node and hands back its lines.

  Made by `tfdist.launch.ray._task` (`ray.remote(TaskProcess)`), which polls `read`.
  """

  def __init__(self):
    self._process: Optional[subprocess.Popen] = None
    self._lines: List[str] = []
    self._lock = threading.Lock()
    self._result_folder: Optional[str] = None
    self._joined_folder: Optional[str] = None
    self._remover = None  # Its pipe to the folders' remover (`folders.remove_when_gone`).

  def start(self, command: Sequence[str], env: Mapping[str, str], cwd: Optional[str],
            reports: bool = False) -> str:
    """Starts `command` with the node's environment plus `env`; returns where it runs.

    `reports`: the task writes a function's result (`notebook_launch`) to a
    file in a folder made here for it, which `result` hands back.
    """
    import ray  # pylint: disable=import-outside-toplevel  Runs on a Ray node.
    # A data worker registers at this node's address (tfdist.data.service.serve).
    full_env = {**os.environ, **env,
                data_service_lib.NODE_ADDRESS_ENV: ray.util.get_node_ip_address()}
    if reports:
      self._result_folder = tempfile.mkdtemp(prefix="tfdist-result-")  # Mode 0700.
      full_env[result_channel.RESULT_FILE_ENV] = os.path.join(self._result_folder,
                                                              result_channel.NAME)
    if env.get(trains_alone.JOINED_DIR_ENV):
      # The launcher's folder is on its machine: the task records here, `joined` hands them over.
      self._joined_folder = tempfile.mkdtemp(prefix="tfdist-joined-")  # Mode 0700.
      full_env[trains_alone.JOINED_DIR_ENV] = self._joined_folder
    made = [f for f in (self._result_folder, self._joined_folder) if f]
    if made:  # Gone with this actor, also when Ray kills it (a lost launcher, a lost actor).
      self._remover = folders.remove_when_gone(made)
    if cwd is not None and not os.path.isdir(cwd):
      cwd = None  # Not on this node: the worker's own folder (give absolute paths).
    command = _watched(command, full_env)
    self._process = subprocess.Popen(
        list(command), env=full_env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True,
        preexec_fn=supervision.die_with_parent(os.getpid()))
    threading.Thread(target=self._pump, daemon=True).start()
    return f"{socket.gethostname()} ({ray.util.get_node_ip_address()}, Ray node " \
           f"{ray.get_runtime_context().get_node_id()[:8]})"

  def _pump(self) -> None:
    # As the local launcher reads: Keras's bar, redrawn with `\r`, shows while the epoch runs.
    supervision.read_lines(self._process.stdout, self._add)

  def _add(self, lines: List[str]) -> None:
    if lines:
      with self._lock:
        self._lines.extend(lines)

  def read(self, timeout: float = 0.2) -> Tuple[List[str], Optional[int]]:
    """(lines since the last call, the exit code once it has exited and said everything)."""
    try:
      code = self._process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      code = None
    # Whether the output has ended, before its last lines are taken: else lines the pump
    # adds between the two would be lost with the exit code.
    ended = self._process.stdout is None or self._process.stdout.closed
    with self._lock:
      lines, self._lines = self._lines, []
    return lines, code if ended else None

  def result(self) -> Optional[bytes]:
    """The pickled result the task wrote (None: none), as bytes; its folder is removed."""
    if self._result_folder is None:
      return None
    try:
      with open(os.path.join(self._result_folder, result_channel.NAME), "rb") as f:
        return f.read()  # Not unpickled here: only the caller that asked for it loads it.
    except FileNotFoundError:
      return None
    finally:
      shutil.rmtree(self._result_folder, ignore_errors=True)
      self._result_folder = None

  def rows(self) -> List[str]:
    """The task's rows of step times so far (its wrapper, `tfdist.launch._task`, keeps them in
    its folder), as text."""
    if self._joined_folder is None:
      return []
    return [step_times.to_text(row) for row in step_times.read(self._joined_folder)]

  def joined(self) -> Tuple[List[str], List[str]]:
    """The task's records of joining a collective (`tfdist.task._trains_alone`), and its rows
    of step times, as text; the folder is removed here."""
    if self._joined_folder is None:
      return [], []
    try:
      return trains_alone.records(self._joined_folder), self.rows()
    finally:
      shutil.rmtree(self._joined_folder, ignore_errors=True)
      self._joined_folder = None

  def signal(self, signum: int) -> None:
    """Sends `signum` to the task's process group (it and its children)."""
    if self._process is not None:
      supervision.signal_group(self._process, signum)


def _watched(command: Sequence[str], env: Mapping[str, str]) -> List[str]:
  """A training task's command under the task wrapper (`tfdist.launch._task`, which `tfdist
  task` runs too): it watches the task for stalls on its node.

  The launcher cannot read a task's progress on another node; the wrapper beside
  it can (`tfdist.launch.watchdog.watch_task`). A missing program is refused
  here, as it was before the wrapper, naming it.
  """
  if not env.get("TF_CONFIG") or env.get(watchdog.STALL_TIMEOUT_ENV) == "0":
    return list(command)  # A tf.data service server, or the watchdog turned off.
  spec = cluster_lib.ClusterSpec.from_tf_config(env["TF_CONFIG"])
  if not supervision.trains(spec, spec.task):
    return list(command)  # A ps task, a parameter-server worker, an evaluator: never step.
  if shutil.which(command[0], path=env.get("PATH")) is None:
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command[0])
  return [sys.executable, "-m", "tfdist.launch._task", "--", *command]


def run_task(address: str, command: Sequence[str], environ: Mapping[str, str],
             output: TextIO, cwd: Optional[str]) -> int:
  """One task's local end: its actor in its bundle, the lines it prints, its exit code.

  SIGTERM and SIGINT are passed on to the task; the return value is its exit
  code (negative: the signal that killed it). The task `notebook_launch`
  named to report has its result carried back in Ray's object store (its
  node may be another machine) into the file the launcher made for it, and
  every task's records of joining a collective into the launcher's folder
  (`tfdist.task._trains_alone`).
  """
  ray = import_ray()
  ray.init(address=address, namespace=NAMESPACE, log_to_driver=False,
           logging_level=logging.ERROR, configure_logging=False)
  from ray.util.placement_group import get_placement_group
  task = environ[TASK_ENV]  # "worker:1", "data_worker:0"...
  bundles = json.loads(environ[BUNDLES_ENV])
  index, resources = bundles[task]
  group = get_placement_group(environ[PLACEMENT_GROUP_ENV])
  actor = ray.remote(TaskProcess).options(
      **ray_placement.bundle_options(group, index, resources), max_restarts=0).remote()
  result_file = environ.get(result_channel.RESULT_FILE_ENV)
  reports = bool(result_file) and environ.get(result_channel.RESULT_TASK_ENV) == task
  env = forwarded(environ)
  env.pop(result_channel.RESULT_FILE_ENV, None)  # A path here; the actor makes one there.
  try:
    where = ray.get(actor.start.remote(list(command), env, cwd, reports))
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
  folder = environ.get(trains_alone.JOINED_DIR_ENV)
  rows_due = time.monotonic() + ROWS_SECONDS
  while True:
    while passed < len(received):
      actor.signal.remote(received[passed])
      passed += 1
    try:
      lines, code = ray.get(actor.read.remote())
      if folder and time.monotonic() >= rows_due:  # For the launcher's straggler line.
        rows_due = time.monotonic() + ROWS_SECONDS
        _copy_rows(ray, actor, task, folder)
    except ray.exceptions.RayActorError as e:  # Its node, or its worker process, is gone.
      output.write(f"tfdist: {task} was lost with its Ray actor (its node left the cluster, "
                   f"or its worker died): {str(e).splitlines()[0]}\n")
      output.flush()
      return LOST_EXIT_CODE
    for line in lines:
      output.write(line + "\n")
    output.flush()
    if code is not None:
      return hand_back(ray.get, actor, task, code, environ, output,
                       result_file if reports else None)


def _copy_rows(ray, actor, task: str, folder: str) -> None:
  """Copies `task`'s row of step times from its actor into the launcher's `folder`.

  A lost actor is the caller's to report; any other failure costs one copy of a
  line that is only informative, never the task.
  """
  try:
    watchdog.keep_rows(step_times.rows_of(ray.get(actor.rows.remote()), task), folder)
  except ray.exceptions.RayActorError:
    raise
  except ray.exceptions.RayError as error:
    logger.debug("tfdist: %s's step times did not reach the launcher: %s", task, error)


def hand_back(get, actor, task: str, code: int, environ: Mapping[str, str], output: TextIO,
              result_file: Optional[str] = None) -> int:
  """After the task exited with `code`: its result and records from its actor; `code` still.

  `get` is `ray.get`. An actor lost now (its node left, its worker died) costs
  the result and the records, never the task's exit code: one line says so.
  """
  ray = import_ray()
  try:
    if result_file:
      data = get(actor.result.remote())
      if code == 0 and data is not None:
        result_channel.write(result_file, data)
    folder = environ.get(trains_alone.JOINED_DIR_ENV)
    if folder:  # For the launcher's end-of-job lines.
      reply = get(actor.joined.remote())
      names, rows = reply if isinstance(reply, tuple) and len(reply) == 2 else ([], [])
      trains_alone.add_records(folder, names)
      watchdog.keep_rows(step_times.rows_of(rows, task), folder)
  except ray.exceptions.RayActorError as e:
    output.write(f"tfdist: {task} exited with code {code}, then its Ray actor was lost before "
                 f"handing back its result and records: {str(e).splitlines()[0]}\n")
    output.flush()
  return code


def newly_named(rows: Sequence[step_times.TaskSteps],
                named: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
  """(the straggler line to print or None, the task named so far) for the tasks' `rows`.

  A task is named once: again only after another task was named in between.
  """
  line = step_times.straggler(rows)
  task = line.split(" ", 1)[0] if line else None
  if task is None or task == named:
    return None, named
  return line, task


def name_stragglers(folder: str, done: threading.Event, report,
                    seconds: float = ROWS_SECONDS) -> None:
  """Until `done`: names a task markedly slower than the rest among the rows in `folder`.

  The tasks' nodes share no folder, so no chief can read the other tasks' rows as
  under a local launch or SLURM: each task's local process copies its row here
  (`run_task`), and the launcher names the straggler (`newly_named`; `report`
  writes the line).
  """
  named = None
  while not done.wait(seconds):
    try:
      line, named = newly_named(step_times.read(folder), named)
      if line:
        report(line)
    except Exception as error:  # pylint: disable=broad-except  A note never stops the job.
      logger.debug("tfdist: no straggler line: %s", error)


class RayLauncher(launcher_lib.Launcher):
  """Every task as a process on a node of a Ray cluster, supervised from here.

  Args:
    options: what every launcher shares (`tfdist.launch.LaunchOptions`): as
      `tfdist.launch.launch_local` takes them. Each task's local process watches
      the stall timeout on its node; `data_work_dir`, with a job's
      `data_workers`, is a folder on the dispatcher's node.
    address (keyword-only, as the rest): the Ray cluster ("host:port", "auto"
      or "local"); None: `RAY_ADDRESS`.
    cpus_per_task: CPUs each task's bundle holds.
    resources: task type -> resources replacing or adding to the defaults
      (`parse_resources`), e.g. {"worker": {"GPU": 2, "memory": 8e9}}.
    placement: "SPREAD" the tasks over nodes, or "PACK" them onto few.
    min_workers: a collective job whose workers cannot all be placed again
      within `rescale_timeout` after a failure goes on with at least this
      many, and grows back when the cluster has room (None: never fewer).
    rescale_timeout: seconds to wait for every worker before going on with fewer.

  Raises:
    ValueError: a bad placement, CPU count or min_workers.
  """

  name = "ray"

  def __init__(self, options: Optional[launcher_lib.LaunchOptions] = None, *,
               address: Optional[str] = None, cpus_per_task: float = 1.0,
               resources: Optional[Mapping[str, Mapping[str, float]]] = None,
               placement: str = "SPREAD", min_workers: Optional[int] = None,
               rescale_timeout: float = ray_placement.RESCALE_SECONDS):
    super().__init__(options)
    if placement not in PLACEMENTS:
      raise ValueError(f"`placement` must be one of {list(PLACEMENTS)}. "
                       f"Received: placement={placement!r}")
    if not cpus_per_task > 0:
      raise ValueError(f"`cpus_per_task` must be > 0. Received: cpus_per_task={cpus_per_task!r}")
    if min_workers is not None and not (isinstance(min_workers, int) and min_workers >= 1):
      raise ValueError(f"`min_workers` must be an integer >= 1 (or None: never fewer "
                       f"workers). Received: min_workers={min_workers!r}")
    self.address, self.cpus_per_task, self.placement = address, cpus_per_task, placement
    self.resources = dict(resources or {})
    self.min_workers, self.rescale_timeout = min_workers, rescale_timeout

  def _check_elastic(self, job: launcher_lib.Job) -> None:
    if self.min_workers is None:
      return
    if job.ps:
      raise ValueError(
          "--min_workers is for collective jobs: a parameter-server job already goes on "
          "without a lost worker (the coordinator reschedules its steps). Drop --min_workers. "
          f"Received: min_workers={self.min_workers}, ps={job.ps}")
    if self.min_workers > job.workers:
      raise ValueError(f"--min_workers must be at most --workers. Received: "
                       f"min_workers={self.min_workers}, workers={job.workers}")
    if not self.options.max_restarts:
      raise ValueError(
          "--min_workers resumes a job on fewer workers after a failure, which needs "
          "restarts: give --max_restarts >= 1 too. Received: "
          f"min_workers={self.min_workers}, max_restarts=0")

  def launch(self, command: Sequence[str], job: launcher_lib.Job) -> int:
    options = self.options
    output = options.output or sys.stdout
    if options.data_work_dir and not job.data_workers:
      raise ValueError("`data_work_dir` journals a tf.data service's dispatcher; give "
                       "data_workers >= 1 too. Received: data_workers=0, "
                       f"data_work_dir={options.data_work_dir!r}")
    self._check_elastic(job)
    address = resolve_address(self.address, options.env)
    job, note = launcher_lib.with_coordinator(job)
    if note:
      output.write(f"[tfdist launch] {note}\n")
    ray = connect(address)
    try:
      tasks = list(cluster_lib.ClusterSpec.local(
          job.workers, ps=job.ps, chief=job.chief, evaluator=job.evaluator).tasks())
      tasks += ray_placement.server_tasks(job.data_workers)
      placement = ray_placement.reserve(
          ray, tasks, self.cpus_per_task, self.placement, resources=self.resources,
          min_workers=self.min_workers, rescale_timeout=self.rescale_timeout)
      shortfall = placement.shortfall()
      output.write(f"[tfdist launch] {placement.spec()} on Ray at {address}"
                   f"{': ' + shortfall if shortfall else ''}\n")
      if job.data_workers:
        output.write(f"[tfdist launch] {placement.data_service(options.data_work_dir)}\n")
      output.write(f"[tfdist launch] {exposure.warning('ray', _ports(placement, job))}\n")
      output.flush()
      # Each task's local process connects to Ray too, with the launcher's credentials.
      env = {**with_auth(options.environment()),
             PLACEMENT_GROUP_ENV: placement.group,
             ADDRESS_ENV: ray.get_runtime_context().gcs_address}
      # A bad TFDIST_TRAINS_ALONE or TFDIST_STALL_TIMEOUT fails now, not after the job.
      trains_alone.mode(env)
      watchdog.resolve_timeout(None, job.num_tasks, env)
      # Each task's local process leaves its node's records of joining a collective here.
      with trains_alone.joined_folder(env) as joined_dir:
        cluster = _Cluster(command, env, output, options.grace_period, placement,
                           options.data_work_dir)
        trained = threading.Event()
        namer = threading.Thread(target=name_stragglers, name="tfdist-stragglers",
                                 args=(joined_dir, trained, cluster.report), daemon=True)
        namer.start()
        try:
          code = cluster.run(options.timeout, options.max_restarts)
        finally:
          trained.set()
          namer.join(timeout=10)  # Its last line comes before the table.
        summary = watchdog.step_summary(joined_dir)  # The last rows the tasks' actors sent.
        if summary:
          cluster.report(summary)
        return trains_alone.job_end(code, joined_dir, env, cluster.report)
    finally:
      ray.shutdown()  # The placement group, and any actor left in it, go with it.


def _ports(placement: ray_placement.Placement, job: launcher_lib.Job) -> str:
  """The ports the job's servers take on their nodes, for the launch's warning."""
  addresses = [a for job_addresses in placement.spec().jobs.values() for a in job_addresses]
  if job.data_workers:
    service = placement.data_service()
    addresses += [service.dispatcher, *service.workers]
  ports = (a.rpartition(":")[2] for a in addresses)
  return exposure.ranges(int(p) for p in ports if p.isdigit())


class _Cluster(supervision.Cluster):
  """The local supervision, with the tasks placed again before a restart.

  A restarted task may be on another node (its node was lost, and Ray moved
  its bundle), and its old port may be taken: every task gets a new address.
  With `min_workers`, the job may go on with fewer workers; while it does,
  the launcher looks every few seconds whether the cluster has room for all
  again, and then restarts every task (each backs up on SIGTERM first) on all.
  """

  def __init__(self, command, env, output, grace_period, placement: ray_placement.Placement,
               data_work_dir: Optional[str] = None):
    super().__init__(command, placement.spec(), env, output, grace_period,
                     placement.data_service(data_work_dir))
    self.placement, self.data_work_dir = placement, data_work_dir
    self.prefix = [sys.executable, "-m", "tfdist.launch.ray._task", "--"]
    self.next_look = 0.0

  def prepare_attempt(self) -> None:
    if self.attempt:
      # The last attempt's rows would be compared with the new one's (and a worker the
      # job went on without would stay in the table).
      folder = self.env.get(trains_alone.JOINED_DIR_ENV, "")
      for name in os.listdir(folder) if os.path.isdir(folder) else []:
        if name.endswith(step_times.STEPS_SUFFIX):
          with contextlib.suppress(FileNotFoundError):  # A copy of the last attempt's, replaced.
            os.remove(os.path.join(folder, name))
      shrunk = self.placement.place()
      self.spec = self.placement.spec()
      self.data_service = self.placement.data_service(self.data_work_dir)
      self.report(f"{self.spec} for the restart" + (f": {shrunk}" if shrunk else ""))
    self.env[BUNDLES_ENV] = json.dumps(self.placement.bundles())

  def task_env(self, task) -> Dict[str, str]:
    env = super().task_env(task)
    env[TASK_ENV] = str(task)
    if self.placement.min_workers is not None:
      env[elastic.WORKERS_ASKED_ENV] = str(self.placement.workers_asked)
    return env

  def server_env(self, task) -> Dict[str, str]:
    return {**super().server_env(task), TASK_ENV: str(task)}

  def moved(self, task) -> Optional[str]:
    # Data workers register anew wherever they are; trainers find the others
    # at the addresses they were given.
    if task.type == data_servers.DATA_WORKER:
      return None
    return self.placement.moved(task)

  def planned_restart(self) -> Optional[str]:
    placed, asked = self.placement.workers_placed, self.placement.workers_asked
    if placed == asked or time.monotonic() < self.next_look:
      return None
    self.next_look = time.monotonic() + GROW_CHECK_SECONDS
    if not self.placement.complete():
      return None
    return f"the Ray cluster has room for all {asked} workers again (running on {placed})"
