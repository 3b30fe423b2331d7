"""Where the tasks of `tfdist launch --ray` run: a placement group, its bundles, their addresses.

One bundle per task (chief, workers, ps, evaluator) and per tf.data service
server (its dispatcher and data workers) holds what the task needs
(`task_resources`: CPUs, a GPU where the cluster has them, or what
`--ray_resources` asks per task type). Each bundle's node gives its address
and a port free there (`reserve`, `Placement.place`), and the `ClusterSpec`
is built from them.

When a node is lost, Ray moves its bundles to the nodes left as room allows.
Before a restart `Placement.place` asks every bundle for its address again.
With `min_workers` (`--min_workers`), a collective job whose workers cannot
all be placed within `rescale_timeout` goes on with the workers that can (at
least `min_workers`), numbered from 0; `Placement.complete` then says when
the cluster has room for all of them again (Ray places the missing bundles as
nodes come), so that the launcher grows the job back. `Placement.moved`
tells whether a task that others know by its address (a parameter-server
worker, the dispatcher) would come back elsewhere if restarted alone.
"""

import time
import uuid
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from tfdist import cluster as cluster_lib
from tfdist.cluster import _data_service as data_service_lib
from tfdist.cluster import _spec as spec_lib
from tfdist.launch import _data_servers as data_servers
from tfdist.launch import _launcher as launcher_lib

# Seconds to wait for the cluster to have room for every task.
RESERVE_SECONDS = 60.0
# --min_workers: seconds to wait for every worker before going on with fewer.
RESCALE_SECONDS = 60.0
# Kubernetes' quantity suffixes, which Ray users also meet in KubeRay's specs.
_SUFFIXES = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
             "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}


# The tf.data service's servers have bundles too; they are no TF tasks.
SERVER_TYPES = (data_servers.DISPATCHER, data_servers.DATA_WORKER)


class RayUnavailable(launcher_lib.LaunchError):
  """Ray is not installed, or no Ray cluster was named, reached, or had room."""

  exit_code = 2


def task_resources(ray, task: cluster_lib.TaskSpec, cpus: float,
                   overrides: Optional[Mapping[str, Mapping[str, float]]] = None
                   ) -> Dict[str, float]:
  """One task's bundle: `cpus` CPUs, a GPU for a computing task if the cluster has GPUs.

  `overrides[task.type]` (see `parse_resources`) replaces or adds resources:
  CPU, GPU, memory (bytes) or any custom resource of the cluster's nodes; an
  amount of 0 leaves that resource out.
  """
  resources = {"CPU": float(cpus)}
  computes = task.type in (cluster_lib.CHIEF, cluster_lib.WORKER)
  if computes and ray.cluster_resources().get("GPU", 0) >= 1:
    resources["GPU"] = 1.0
  resources.update((overrides or {}).get(task.type, {}))
  return {name: amount for name, amount in resources.items() if amount > 0}


def _amount(text: str) -> float:
  for suffix in sorted(_SUFFIXES, key=len, reverse=True):
    if text.endswith(suffix):
      return float(text[:-len(suffix)]) * _SUFFIXES[suffix]
  return float(text)


def parse_resources(specs: Sequence[str]) -> Dict[str, Dict[str, float]]:
  """Task type -> resources, from strings such as "worker:GPU=2,memory=8Gi".

  Each string is `TYPE:NAME=AMOUNT[,NAME=AMOUNT...]`, TYPE one of chief,
  worker, ps, evaluator, dispatcher or data_worker; NAME is CPU, GPU, memory (bytes) or a custom
  resource of the cluster's nodes; AMOUNT a number >= 0, with an optional
  K, M, G, T (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024). A later
  string for the same type adds to it.

  Example:

      >>> parse_resources(["worker:GPU=2,memory=1Ki", "ps:CPU=4"])
      {'worker': {'GPU': 2.0, 'memory': 1024.0}, 'ps': {'CPU': 4.0}}

  Raises:
    ValueError: a string that is not of that form, naming it.
  """
  parsed: Dict[str, Dict[str, float]] = {}
  for spec in specs:
    task_type, _, pairs = spec.partition(":")
    amounts = {}
    try:
      if task_type not in spec_lib.TASK_TYPES + SERVER_TYPES or not pairs:
        raise ValueError
      for pair in pairs.split(","):
        name, equals, amount = (part.strip() for part in pair.partition("="))
        amounts[name] = _amount(amount)
        if not equals or not name or not amounts[name] >= 0:
          raise ValueError
    except ValueError:
      raise ValueError(
          f"A task type's Ray resources must be TYPE:NAME=AMOUNT[,NAME=AMOUNT...], TYPE one "
          f"of {list(spec_lib.TASK_TYPES + SERVER_TYPES)}, AMOUNT a number >= 0 (suffixes K M G T Ki Mi "
          f"Gi Ti), e.g. 'worker:GPU=2,memory=8Gi'. Received: {spec!r}") from None
    parsed.setdefault(task_type, {}).update(amounts)
  return parsed


def bundle_options(placement_group, bundle: int, resources: Mapping[str, float]) -> dict:
  """`.options(...)` of an actor or task that takes all of bundle `bundle`."""
  from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
  custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU", "memory")}
  return dict(num_cpus=resources.get("CPU", 0), num_gpus=resources.get("GPU", 0),
              memory=resources.get("memory"), resources=custom,
              scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group, bundle))


def _free_address() -> Tuple[str, int, str]:
  """(this node's Ray address, a port free on it now, the node's ID).

  The port comes from below the kernel's ephemeral range, where no outgoing
  connection (Ray's own, on a busy node) takes it before the task binds it.
  """
  import ray  # pylint: disable=import-outside-toplevel  Runs on a Ray node.
  host = ray.util.get_node_ip_address()
  return host, spec_lib.free_port_at(host), ray.get_runtime_context().get_node_id()


def _host(host: str) -> str:
  return f"[{host}]" if ":" in host else host


def cluster_spec(tasks: Sequence[cluster_lib.TaskSpec],
                 addresses: Sequence[Optional[str]]) -> cluster_lib.ClusterSpec:
  """The `ClusterSpec` of `tasks` at `addresses` (in the same order)."""
  jobs: Dict[str, List[str]] = {}
  for task, address in zip(tasks, addresses):
    if address is not None and task.type in spec_lib.CLUSTER_TASK_TYPES:
      jobs.setdefault(task.type, []).append(address)
  return cluster_lib.ClusterSpec(
      jobs, has_evaluator=any(t.type == cluster_lib.EVALUATOR for t in tasks))


class Placement:
  """A job's placement group on a Ray cluster, and where each of its tasks runs now.

  Build it with `reserve`. `spec()` is the cluster of the tasks placed,
  `bundles()` each task's bundle (by its name in that cluster), `place()`
  asks every bundle for its address again before a restart.

  Attributes:
    group: the placement group's name (in tfdist's Ray namespace).
    tasks: every task the job asked for, in bundle order.
    min_workers: the fewest workers a restart may go on with (None: all).
  """

  def __init__(self, ray, group: str, tasks: Sequence[cluster_lib.TaskSpec],
               resources: Sequence[Mapping[str, float]], *,
               min_workers: Optional[int] = None, rescale_timeout: float = RESCALE_SECONDS):
    self.ray, self.group, self.tasks = ray, group, list(tasks)
    self.resources = [dict(r) for r in resources]
    self.min_workers, self.rescale_timeout = min_workers, rescale_timeout
    self.addresses: Dict[int, Optional[str]] = {}  # Bundle index -> "host:port" of a task placed.
    self.nodes: Dict[int, str] = {}  # Bundle index -> the ID of its node when placed.

  def __repr__(self) -> str:
    return (f"Placement(group={self.group!r}, workers={self.workers_placed}/"
            f"{self.workers_asked}, min_workers={self.min_workers})")

  @property
  def workers_asked(self) -> int:
    """The chief and workers the job asked for."""
    return sum(t.type in (cluster_lib.CHIEF, cluster_lib.WORKER) for t in self.tasks)

  @property
  def workers_placed(self) -> int:
    """The chief and workers placed now."""
    return sum(self.tasks[i].type in (cluster_lib.CHIEF, cluster_lib.WORKER)
               for i in self.addresses)

  def _placed_tasks(self) -> List[Tuple[int, cluster_lib.TaskSpec]]:
    """(bundle index, task as numbered in the cluster now), in bundle order."""
    counts: Dict[str, int] = {}
    placed = []
    for i in sorted(self.addresses):
      task_type = self.tasks[i].type
      placed.append((i, cluster_lib.TaskSpec(task_type, counts.get(task_type, 0))))
      counts[task_type] = counts.get(task_type, 0) + 1
    return placed

  def spec(self) -> cluster_lib.ClusterSpec:
    """The cluster of the tasks placed, at their addresses, each job numbered from 0 (no servers)."""
    placed = self._placed_tasks()
    return cluster_spec([t for _, t in placed], [self.addresses[i] for i, _ in placed])

  def bundles(self) -> Dict[str, list]:
    """Task name now ("worker:0") -> [bundle index, the bundle's resources]."""
    return {str(t): [i, self.resources[i]] for i, t in self._placed_tasks()}

  def data_service(self, work_dir: Optional[str] = None
                   ) -> Optional[data_service_lib.DataServiceSpec]:
    """The tf.data service at its servers' addresses, if the job has one."""
    placed = self._placed_tasks()
    address = lambda kind: [self.addresses[i] for i, t in placed if t.type == kind]
    if not address(data_servers.DISPATCHER):
      return None
    return data_service_lib.DataServiceSpec(address(data_servers.DISPATCHER)[0],
                                            tuple(address(data_servers.DATA_WORKER)), work_dir)

  def moved(self, task: cluster_lib.TaskSpec) -> Optional[str]:
    """Why `task`, restarted alone, would not be at its address (None: it would).

    Its bundle is on another node than when it was placed (Ray moved it from a
    lost node), or on none yet.
    """
    index = next(i for i, t in self._placed_tasks() if t == task)
    now = self._table()["bundles_to_node_id"].get(index)
    if now == self.nodes.get(index):
      return None
    return (f"its node left the Ray cluster, and the others know it at "
            f"{self.addresses[index]}")

  def _probe(self, indices: Sequence[int], timeout: float) -> Dict[int, Optional[str]]:
    """Bundle index -> "host:port" (None: the evaluator) for the bundles on a node within `timeout`."""
    from ray.util.placement_group import get_placement_group
    group = get_placement_group(self.group)
    probe = self.ray.remote(_free_address)
    pending = {probe.options(**bundle_options(group, i, self.resources[i])).remote(): i
               for i in indices}
    ready, late = self.ray.wait(list(pending), num_returns=len(pending), timeout=timeout)
    for ref in late:  # Its bundle has no node yet; it must not run later in its place.
      self.ray.cancel(ref)
    found = {}
    for ref in ready:
      i = pending[ref]
      host, port, self.nodes[i] = self.ray.get(ref)
      found[i] = None if self.tasks[i].type == cluster_lib.EVALUATOR else f"{_host(host)}:{port}"
    return found

  def _enough(self, found: Mapping[int, Optional[str]]) -> bool:
    """Whether the tasks in `found` may go on without the others (--min_workers)."""
    if self.min_workers is None:
      return len(found) == len(self.tasks)
    missing = [self.tasks[i] for i in range(len(self.tasks)) if i not in found]
    workers = sum(t.type == cluster_lib.WORKER for i, t in enumerate(self.tasks) if i in found)
    return all(t.type == cluster_lib.WORKER for t in missing) and workers >= self.min_workers

  def place(self, timeout: float = RESERVE_SECONDS) -> str:
    """Asks every bundle for its node's address and a free port there; says what changed.

    Waits up to `timeout` for every task's bundle to be on a node (Ray moves
    the bundles of a lost node as room allows). With `min_workers`, it waits
    `rescale_timeout` for every worker, then goes on with the workers placed
    by then if they are at least `min_workers`. A bundle that has a node is
    waited for until `timeout` even then: its probe is only slow (a Ray worker
    process starting on a busy node), which is no lack of room.

    Returns:
      "" when every task is placed, else a sentence saying how many workers
      go on (`shortfall`).

    Raises:
      RayUnavailable: too few tasks placed within `timeout`.
    """
    start = time.monotonic()
    everything = range(len(self.tasks))
    found = self._probe(everything, self.rescale_timeout if self.min_workers else timeout)
    while len(found) < len(self.tasks):
      missing = [i for i in everything if i not in found]
      # A probe late on a node with room once counted as no room: a loaded CI
      # run began a job of 2 workers on 1.
      if self._enough(found) and not self._on_a_node(missing):
        break
      left = timeout - (time.monotonic() - start)
      if left <= 0:
        if self._enough(found):
          break  # Listed on a node that never answered (being lost, or held): enough.
        raise RayUnavailable(
            f"The Ray cluster found no node for {len(missing)} of the job's "
            f"{len(self.tasks)} tasks within {timeout:g}s (a node was lost and no other has "
            f"room); it has {self.ray.available_resources()}. Add nodes"
            f"{'' if self.min_workers else ', or let the job go on with fewer workers (--min_workers)'}"
            f". Received: bundles={self.resources}")
      found.update(self._probe(missing, min(left, 5.0)))
    self.addresses = found
    return self.shortfall()

  def _on_a_node(self, indices: Sequence[int]) -> List[int]:
    """Which of the bundles `indices` Ray has put on a node (their probe may still be starting)."""
    nodes = self._table()["bundles_to_node_id"]
    return [i for i in indices if nodes.get(i)]  # "": no node yet.

  def shortfall(self) -> str:
    """The empty string when every task is placed, else how many workers go on, and until when."""
    if len(self.addresses) == len(self.tasks):
      return ""
    return (f"only {self.workers_placed} of the {self.workers_asked} workers found room within "
            f"{self.rescale_timeout:g}s; going on with {self.workers_placed} "
            f"(--min_workers={self.min_workers}) from the backup, and back to "
            f"{self.workers_asked} when the cluster has room")

  def complete(self) -> bool:
    """Whether every bundle is on a node (Ray placed the ones a lost node held)."""
    return self._table()["state"] == "CREATED"

  def _table(self) -> dict:
    """Ray's record of the group now: its state, and each bundle's node ("" for none)."""
    from ray.util.placement_group import get_placement_group, placement_group_table
    return placement_group_table(get_placement_group(self.group))


def server_tasks(data_workers: int) -> List[cluster_lib.TaskSpec]:
  """The tf.data service's dispatcher and data workers, as tasks to place (none without workers)."""
  if not data_workers:
    return []
  return [cluster_lib.TaskSpec(data_servers.DISPATCHER, 0)] + [
      cluster_lib.TaskSpec(data_servers.DATA_WORKER, i) for i in range(data_workers)]


def reserve(ray, tasks: Sequence[cluster_lib.TaskSpec], cpus: float, placement: str, *,
            resources: Optional[Mapping[str, Mapping[str, float]]] = None,
            min_workers: Optional[int] = None, rescale_timeout: float = RESCALE_SECONDS,
            timeout: float = RESERVE_SECONDS) -> Placement:
  """A new placement group with a bundle per task (PACK or SPREAD), every task placed.

  The evaluator's address is None: it serves nothing.

  Raises:
    RayUnavailable: the cluster has no room for the bundles within `timeout`.
  """
  from ray.util.placement_group import placement_group, remove_placement_group
  bundles = [task_resources(ray, task, cpus, resources) for task in tasks]
  name = f"tfdist-{uuid.uuid4().hex[:12]}"
  group = placement_group(bundles, strategy=placement, name=name)
  ready, _ = ray.wait([group.ready()], timeout=timeout)
  if not ready:
    remove_placement_group(group)
    raise RayUnavailable(
        f"The Ray cluster has no room for {len(bundles)} tasks ({bundles}, {placement}) "
        f"after {timeout:g}s; it has {ray.available_resources()}. Give it more nodes, or "
        f"fewer resources per task (--ray_cpus_per_task, --ray_resources). Received: "
        f"tasks={[str(t) for t in tasks]}")
  placed = Placement(ray, name, tasks, bundles, min_workers=min_workers,
                     rescale_timeout=rescale_timeout)
  placed.place(timeout)
  return placed
