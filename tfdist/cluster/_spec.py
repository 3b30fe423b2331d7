"""Cluster specs: validated jobs and addresses, and the per-task `TF_CONFIG`.

A `ClusterSpec` is the training cluster (chief, worker and ps jobs) plus, optionally,
the task this process is and whether a sidecar evaluator exists. The evaluator is
never listed inside the cluster: TensorFlow names it only in `TF_CONFIG["task"]`.

This module imports no TensorFlow, so launchers and `tfdist doctor` stay light.
Where a spec comes from when none is given (TF_CONFIG, SLURM, a Kubernetes
Indexed Job) is `tfdist.cluster.environment`'s job.

Example:

    >>> spec = ClusterSpec({"worker": ["localhost:2222", "localhost:2223"]})
    >>> spec.num_workers
    2
    >>> json.loads(spec.tf_config("worker", 1))["task"]
    {'type': 'worker', 'index': 1}
"""

import dataclasses
import functools
import ipaddress
import json
import os
import random
import re
import socket
import types
import warnings
from typing import Any, Iterator, List, Mapping, Optional, Sequence, Tuple

from tfdist.cluster import environment as environment_lib

CHIEF = "chief"
WORKER = "worker"
PS = "ps"
EVALUATOR = "evaluator"
# The order TensorFlow's own tools list jobs in, used for stable output.
CLUSTER_TASK_TYPES = (CHIEF, WORKER, PS)
TASK_TYPES = CLUSTER_TASK_TYPES + (EVALUATOR,)
TF_CONFIG_KEYS = ("cluster", "task", "rpc_layer", "environment")
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
# An RFC 1123 label; "_" too, because container runtimes name hosts with it and
# resolve those names, and gRPC takes them.
_LABEL = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """One task of a cluster: its job name (`type`) and index in that job."""

  type: str
  index: int

  def __str__(self) -> str:
    return f"{self.type}:{self.index}"


class ClusterSpec:
  """A validated TensorFlow cluster.

  Build one from a dict, from a `TF_CONFIG` string or the environment, or on free
  loopback ports with `ClusterSpec.local`. Every constructor validates and raises
  `ValueError`/`TypeError` naming the field, the value received and the fix.

  Example:

      >>> spec = ClusterSpec.local(workers=2, ps=1, chief=True)
      >>> sorted(spec.jobs)
      ['chief', 'ps', 'worker']
      >>> os.environ["TF_CONFIG"] = spec.tf_config("worker", 0)  # in worker 0

  Attributes:
    jobs: job name -> tuple of "host:port" addresses (a read-only mapping).
    task: the task this process is, when known (from `TF_CONFIG`), else None.
    has_evaluator: whether a sidecar evaluator task exists beside the cluster.
  """

  def __init__(
      self,
      jobs: Mapping[str, Sequence[str]],
      *,
      task: Optional[TaskSpec] = None,
      has_evaluator: bool = False,
  ):
    jobs = types.MappingProxyType(_validate_jobs(jobs))  # A read-only view.
    set_once = functools.partial(object.__setattr__, self)
    set_once("jobs", jobs)
    set_once("has_evaluator",
             bool(has_evaluator or (task is not None and task.type == EVALUATOR)))
    set_once("task", _validate_task(task, jobs) if task is not None else None)

  def __setattr__(self, name, value):
    raise AttributeError(f"ClusterSpec is immutable: build a new one (e.g. "
                         f"spec.with_task(...)). Received: {name}={value!r}")

  # ----------------------------------------------------------------- constructors

  @classmethod
  def from_dict(cls, cluster: Any, *, task: Any = None) -> "ClusterSpec":
    """Builds a spec from `{"worker": ["host:port", ...], ...}`.

    Args:
      cluster: the `cluster` part of a `TF_CONFIG`.
      task: optional `{"type": ..., "index": ...}` or `TaskSpec` for this process.

    Returns:
      A validated `ClusterSpec`.

    Raises:
      TypeError: `cluster` is not a dict or a job is not a list.
      ValueError: any field is invalid; the message names it and the fix.
    """
    if not isinstance(cluster, Mapping):
      raise TypeError(
          "`cluster` must be an object mapping job names to lists of 'host:port' "
          "strings, e.g. {\"worker\": [\"localhost:2222\"]}. "
          f"Received: {cluster!r}")
    if task is not None and not isinstance(task, TaskSpec):
      task = _parse_task(task)
    return cls(cluster, task=task)

  @classmethod
  def from_tf_config(cls, tf_config: str) -> "ClusterSpec":
    """Parses a `TF_CONFIG` JSON string (`cluster`, `task`, `rpc_layer`, `environment`).

    Raises:
      ValueError: invalid JSON, unknown keys, or any invalid field.
      TypeError: the JSON is not an object, or a part of it has the wrong type.
    """
    try:
      config = json.loads(tf_config)
    except (json.JSONDecodeError, TypeError) as e:
      raise ValueError(
          f"`TF_CONFIG` is not valid JSON ({e}). It must look like "
          '{"cluster": {"worker": ["host:2222"]}, "task": {"type": "worker", "index": 0}}. '
          f"Received: {tf_config!r}") from None
    if not isinstance(config, dict):
      raise TypeError(
          "`TF_CONFIG` must be a JSON object with keys 'cluster' and 'task'. "
          f"Received: {tf_config!r}")
    unknown = sorted(set(config) - set(TF_CONFIG_KEYS))
    if unknown:
      raise ValueError(
          f"`TF_CONFIG` has unknown key(s) {unknown}. Valid keys: {list(TF_CONFIG_KEYS)}. "
          f"Received: {tf_config!r}")
    if "cluster" not in config:
      raise ValueError(
          "`TF_CONFIG` has no 'cluster'. Add the cluster, e.g. "
          f'"cluster": {{"worker": ["host:2222"]}}. Received: {tf_config!r}')
    rpc_layer = config.get("rpc_layer", "grpc")
    if rpc_layer != "grpc":
      raise ValueError(
          "`TF_CONFIG.rpc_layer` must be 'grpc', the only RPC layer TensorFlow "
          f"ships for CPU and GPU clusters. Received: {rpc_layer!r}")
    return cls.from_dict(config["cluster"], task=config.get("task"))

  @classmethod
  def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> Optional["ClusterSpec"]:
    """The cluster this process runs in, from `environ` (default: os.environ).

    Asks each registered `ClusterEnvironment` in order (TF_CONFIG, a
    Kubernetes Indexed Job, a SLURM job step of 2+ tasks); None when none
    applies (a single process). See `tfdist.cluster.environment`.
    """
    environ = os.environ if environ is None else environ
    detected = environment_lib.detect(environ)
    return None if detected is None else detected.cluster_spec(environ)

  @classmethod
  def local(
      cls,
      workers: int = 1,
      *,
      ps: int = 0,
      chief: bool = False,
      evaluator: bool = False,
      host: str = "localhost",
  ) -> "ClusterSpec":
    """A cluster on free ports of this machine's loopback interface.

    Args:
      workers: number of worker tasks (>= 1).
      ps: number of parameter-server tasks.
      chief: whether to add a chief task.
      evaluator: whether a sidecar evaluator task exists (it gets no address).
      host: loopback host name to use in addresses.

    Returns:
      A `ClusterSpec` whose addresses are free loopback ports right now.

    Raises:
      ValueError: a count is out of range or `host` is not a loopback name.
    """
    check_task_count("workers", workers, 1)
    check_task_count("ps", ps, 0)
    if host not in LOOPBACK_HOSTS:
      raise ValueError(
          "`host` of a local cluster must be a loopback name, so that no task "
          f"listens beyond this machine; use one of {list(LOOPBACK_HOSTS)}. "
          f"Received: host={host!r}")
    counts = {CHIEF: int(bool(chief)), WORKER: workers, PS: ps}
    ports = iter(pick_unused_ports(sum(counts.values()), host=host))
    jobs = {job: [f"{_bracket(host)}:{next(ports)}" for _ in range(n)]
            for job, n in counts.items() if n}
    return cls(jobs, has_evaluator=evaluator)

  # ------------------------------------------------------------------- properties

  @property
  def num_workers(self) -> int:
    """Tasks that compute: workers plus the chief (as MultiWorkerMirrored counts)."""
    return count_workers(self.jobs)

  @property
  def num_ps(self) -> int:
    return len(self.jobs.get(PS, ()))

  @property
  def hosts(self) -> List[str]:
    """The distinct host names of the cluster's addresses."""
    return sorted({split_address(a)[0] for addresses in self.jobs.values() for a in addresses})

  @property
  def is_loopback(self) -> bool:
    """Whether every task is on this machine's loopback interface."""
    return set(self.hosts) <= set(LOOPBACK_HOSTS)

  def tasks(self) -> Iterator[TaskSpec]:
    """Every task, cluster jobs first, then the evaluator if any."""
    for job in CLUSTER_TASK_TYPES:
      for index in range(len(self.jobs.get(job, ()))):
        yield TaskSpec(job, index)
    if self.has_evaluator:
      yield TaskSpec(EVALUATOR, 0)

  def address(self, task: TaskSpec) -> Optional[str]:
    """The task's "host:port", or None for the evaluator (it serves nothing)."""
    if task.type == EVALUATOR:
      return None
    return self.jobs[task.type][task.index]

  def with_task(self, task_type: str, task_index: int) -> "ClusterSpec":
    """The same cluster, seen from the given task."""
    return ClusterSpec(self.jobs, task=TaskSpec(task_type, task_index),
                       has_evaluator=self.has_evaluator)

  # ------------------------------------------------------------------ conversions

  def as_dict(self) -> dict:
    """The `cluster` part of a `TF_CONFIG`."""
    return {job: list(addresses) for job, addresses in self.jobs.items()}

  def tf_config(self, task_type: str, task_index: int) -> str:
    """The `TF_CONFIG` JSON for one task.

    Raises:
      ValueError: the task does not exist in this cluster.
    """
    task = _validate_task(TaskSpec(task_type, task_index), self.jobs)
    if task.type == EVALUATOR and not self.has_evaluator:
      raise ValueError(
          "This cluster has no evaluator; build it with `evaluator=True`. "
          f"Received: task_type={task_type!r}")
    return json.dumps({"cluster": self.as_dict(),
                       "task": {"type": task.type, "index": task.index}})

  def to_tf(self):
    """The equivalent `tf.train.ClusterSpec`."""
    import tensorflow as tf  # Deferred: keep this module importable without TF.
    return tf.train.ClusterSpec(self.as_dict())

  def cluster_resolver(self):
    """A `SimpleClusterResolver` for this spec and its task.

    Raises:
      ValueError: the spec does not know which task this process is.
    """
    import tensorflow as tf  # Deferred: keep this module importable without TF.
    if self.task is None:
      # A configuration mistake (e.g. a TF_CONFIG with a cluster but no task), not a
      # wrong order of calls: ValueError.
      raise ValueError(
          "The cluster spec does not say which task this process is. Use "
          "`spec.with_task('worker', 0)` or add TF_CONFIG's 'task', e.g. "
          '"task": {"type": "worker", "index": 0}. Received: task=None')
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        self.to_tf(), task_type=self.task.type, task_id=self.task.index,
        rpc_layer="grpc")

  # ------------------------------------------------------------------------ misc

  def __eq__(self, other) -> bool:
    return (isinstance(other, ClusterSpec) and self.jobs == other.jobs
            and self.task == other.task and self.has_evaluator == other.has_evaluator)

  def __hash__(self) -> int:
    return hash((tuple(sorted(self.jobs.items())), self.task, self.has_evaluator))

  def __repr__(self) -> str:
    parts = [f"{job}={list(self.jobs[job])}" for job in CLUSTER_TASK_TYPES if job in self.jobs]
    if self.has_evaluator:
      parts.append("evaluator=True")
    if self.task is not None:
      parts.append(f"task='{self.task}'")
    return f"ClusterSpec({', '.join(parts)})"


# ------------------------------------------------------------------- validation


def _validate_jobs(jobs: Any) -> dict:
  if not isinstance(jobs, Mapping):
    raise TypeError(f"`cluster` must be a dict of jobs. Received: {jobs!r}")
  if not jobs:
    raise ValueError(
        "`cluster` is empty. List at least one worker, e.g. "
        "{\"worker\": [\"localhost:2222\"]}. Received: {}")
  validated = {}
  seen = {}
  for job, addresses in jobs.items():
    if job == EVALUATOR:
      raise ValueError(
          "`cluster.evaluator` must not be listed in the cluster: the evaluator "
          "is a side task that only TF_CONFIG's 'task' names. Remove it from "
          "'cluster' and give the evaluator task {\"type\": \"evaluator\", "
          f"\"index\": 0}}. Received: cluster.evaluator={addresses!r}")
    if job not in CLUSTER_TASK_TYPES:
      raise ValueError(
          f"`cluster.{job}` is not a task type. Valid task types: "
          f"{list(TASK_TYPES)} (the evaluator outside 'cluster'). Received: {job!r}")
    if isinstance(addresses, str) or not isinstance(addresses, (list, tuple)):
      raise TypeError(
          f"`cluster.{job}` must be a list of 'host:port' strings, e.g. "
          f"[\"localhost:2222\"]. Received: {addresses!r}")
    if not addresses:
      raise ValueError(
          f"`cluster.{job}` is empty. List at least one 'host:port', or remove "
          f"the job. Received: cluster.{job}={list(addresses)!r}")
    if job == CHIEF and len(addresses) > 1:
      raise ValueError(
          "`cluster.chief` must have exactly one task; make the others workers. "
          f"Received: cluster.chief={list(addresses)!r}")
    for index, address in enumerate(addresses):
      field = f"cluster.{job}[{index}]"
      _validate_address(field, address)
      if address in seen:
        raise ValueError(
            f"`{field}` has the same address as `{seen[address]}`; every task "
            f"needs its own port. Received: {address!r}")
      seen[address] = field
    validated[job] = tuple(addresses)
  validated = {job: validated[job] for job in CLUSTER_TASK_TYPES if job in validated}
  hosts = {split_address(a)[0] for a in seen}
  loopback = hosts & set(LOOPBACK_HOSTS)
  if loopback and hosts - loopback:
    warnings.warn(
        f"The cluster mixes loopback hosts {sorted(loopback)} with other hosts "
        f"{sorted(hosts - loopback)}: tasks on other machines cannot reach "
        "'localhost'. Use this machine's network name instead.", UserWarning,
        stacklevel=3)
  return validated


def _validate_address(field: str, address: Any) -> None:
  if not isinstance(address, str):
    raise TypeError(
        f"`{field}` must be a 'host:port' string. Received: {address!r}")
  host, port = split_address(address)
  if port is None:
    raise ValueError(
        f"`{field}` is not host:port. Add a port, e.g. '{address or 'localhost'}:2222'. "
        f"Received: {address!r}")
  if not host:
    raise ValueError(
        f"`{field}` has no host. Use e.g. 'localhost:{port}'. Received: {address!r}")
  problem = _host_problem(host, bracketed=address.startswith("["))
  if problem:
    raise ValueError(
        f"`{field}` has a host that is not a valid host name or IP address: {problem}. "
        "Use a name like 'node-1.example.com', an IPv4 address like '10.0.0.2', or an "
        f"IPv6 address in brackets like '[::1]:2222'. Received: {address!r}")
  if not port.isdigit() or not 1 <= int(port) <= 65535:
    raise ValueError(
        f"`{field}` has a bad port {port!r}; a port is an integer from 1 to 65535. "
        f"Received: {address!r}")


def _host_problem(host: str, *, bracketed: bool) -> str:
  """Why `host` is no RFC 1123 name, IPv4 or bracketed IPv6 address; "" if it is one."""
  if bracketed:
    try:
      ipaddress.IPv6Address(host)
      return ""
    except ValueError:
      return f"{host!r} in brackets is not an IPv6 address"
  if re.fullmatch(r"[0-9.]+", host):
    try:
      ipaddress.IPv4Address(host)
      return ""
    except ValueError:
      return f"{host!r} is not an IPv4 address"
  if len(host) > 253:
    return f"it is {len(host)} characters long, more than 253"
  for label in host.rstrip(".").split("."):
    if not _LABEL.match(label):
      bad = sorted({c for c in label if not (c.isascii() and (c.isalnum() or c in "-_"))})
      return (f"it holds {bad}" if bad else
              f"the part {label!r} is empty, longer than 63 characters, or starts or ends with '-'")
  return ""


def split_address(address: str) -> Tuple[str, Optional[str]]:
  """'host:port' -> (host, port); '[::1]:22' -> ('::1', '22'); no port -> (host, None).

  Example:

      >>> split_address("[::1]:2222")
      ('::1', '2222')
  """
  if address.startswith("["):
    host, _, rest = address[1:].partition("]")
    return host, rest[1:] if rest.startswith(":") else None
  host, sep, port = address.rpartition(":")
  if not sep or ":" in host:  # No colon, or a bare IPv6 address.
    return address, None
  return host, port


def _bracket(host: str) -> str:
  return f"[{host}]" if ":" in host else host


def _parse_task(task: Any) -> TaskSpec:
  if not isinstance(task, Mapping):
    raise TypeError(
        "`task` must be an object like {\"type\": \"worker\", \"index\": 0}. "
        f"Received: {task!r}")
  if "type" not in task:
    raise ValueError(
        "`task.type` is missing. Add one of "
        f"{list(TASK_TYPES)}, e.g. {{\"type\": \"worker\", \"index\": 0}}. Received: {dict(task)!r}")
  if "index" not in task:
    raise ValueError(
        "`task.index` is missing. Add the task's position in its job, e.g. "
        f"{{\"type\": {task['type']!r}, \"index\": 0}}. Received: {dict(task)!r}")
  return TaskSpec(task["type"], task["index"])


def _validate_task(task: TaskSpec, jobs: Mapping[str, Sequence[str]]) -> TaskSpec:
  if task.type not in TASK_TYPES:
    raise ValueError(
        f"`task.type` is not a task type. Valid task types: {list(TASK_TYPES)}. "
        f"Received: {task.type!r}")
  if isinstance(task.index, bool) or not isinstance(task.index, int):
    raise ValueError(
        "`task.index` must be an integer, e.g. 0. "
        f"Received: {task.index!r}")
  if task.type == EVALUATOR:
    if task.index != 0:
      raise ValueError(
          "`task.index` of the evaluator must be 0: TensorFlow runs at most one "
          f"sidecar evaluator. Received: {task.index!r}")
    return task
  if task.type not in jobs:
    raise ValueError(
        f"`task.type` is {task.type!r} but the cluster has no {task.type!r} job; "
        f"its jobs are {sorted(jobs)}. Received: {task.type!r}")
  size = len(jobs[task.type])
  if not 0 <= task.index < size:
    raise ValueError(
        f"`task.index` is out of range for job {task.type!r}, which has {size} "
        f"task(s): use 0 to {size - 1}. Received: {task.index!r}")
  return task


def check_task_count(field: str, value: Any, low: int) -> None:
  """Raises ValueError unless `value` is an integer (not a bool) >= `low`: a count of tasks."""
  if isinstance(value, bool) or not isinstance(value, int) or value < low:
    raise ValueError(f"`{field}` must be an integer >= {low}. Received: {field}={value!r}")


def count_workers(jobs: Mapping[str, Sequence[str]]) -> int:
  """Workers plus the chief in a job mapping (e.g. `resolver.cluster_spec().as_dict()`)."""
  return len(jobs.get(WORKER, ())) + len(jobs.get(CHIEF, ()))


# Where the kernel takes ports for outgoing connections (Linux's default when it
# cannot be read). A port picked inside it may be taken by any connection this
# machine opens before the task binds it. (Ray, too, gives its workers ports
# below it: 10002-19999 by default.)
_EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
_LOWEST_PICKED_PORT = 20000
_random = random.Random()  # Its own generator: a user's random.seed() must not repeat ports.


def _ephemeral_low() -> int:
  try:
    with open(_EPHEMERAL_RANGE_FILE) as f:
      return int(f.read().split()[0])
  except (OSError, ValueError, IndexError):
    return 32768


def pick_unused_ports(count: int, host: str = "127.0.0.1") -> Tuple[int, ...]:
  """`count` distinct TCP ports free on loopback `host` right now.

  On the address family of `host` ("::1" is IPv6; "localhost" and "127.0.0.1"
  IPv4). Ports come from below the kernel's ephemeral range (20000 up to
  `ip_local_port_range`), so no outgoing connection of this machine takes one
  before the cluster binds it; each is bound once to check it is free, and all
  stay bound until every port is picked, so they are distinct. Another process
  picking ports may still take one first; the task then fails at once with an
  error naming the port (`preflight.rendezvous`), and nothing retries on other ports.
  """
  if host not in LOOPBACK_HOSTS:
    raise ValueError(f"`host` must be a loopback address, one of {list(LOOPBACK_HOSTS)}, so "
                     f"that nothing listens beyond this machine. Received: {host!r}")
  family, address = ((socket.AF_INET6, "::1") if host == "::1"
                     else (socket.AF_INET, "127.0.0.1"))
  sockets = []
  try:
    for _ in range(count):
      s = socket.socket(family, socket.SOCK_STREAM)
      sockets.append(s)
      _bind_quiet_port(s, address)
    return tuple(s.getsockname()[1] for s in sockets)
  finally:
    for s in sockets:
      s.close()


def _bind_quiet_port(s: socket.socket, address: str) -> None:
  """Binds `s` at `address`: a few tries below the ephemeral range, then any free port."""
  candidates = range(_LOWEST_PICKED_PORT, _ephemeral_low())
  for port in _random.sample(candidates, min(32, len(candidates))) + [0]:
    try:
      s.bind((address, port))
      return
    except OSError:
      continue
  raise OSError(f"no free TCP port at {address}")


def free_port_at(address: str) -> int:
  """A TCP port free at this machine's `address` now, picked as `pick_unused_ports` picks.

  For a launcher that runs on the node itself (a Ray node's own address).
  """
  family = socket.AF_INET6 if ":" in address else socket.AF_INET
  with socket.socket(family, socket.SOCK_STREAM) as s:
    _bind_quiet_port(s, address)
    return s.getsockname()[1]
