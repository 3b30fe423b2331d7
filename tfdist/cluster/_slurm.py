"""The SLURM environment: the cluster of a job step, on CPU-only nodes too.

TensorFlow's own `SlurmClusterResolver` derives tasks from GPU counts, so on
CPU-only nodes it raises (`gpus_per_task=0`) or finds no tasks at all
(`gpus_per_node=0`). Here every SLURM task is one TF task, whatever the node has:
the task with local id `i` on node `n` listens on `n:ports[i]`, where the ports
are `TFDIST_SLURM_PORT_BASE` onwards if set, else the ones SLURM reserved for
the step (`MpiParams=ports=` in slurm.conf), else derived from the job id.
With `TFDIST_SLURM_LOOPBACK=1` (tfdist's sbatch script sets it where every task
is on one node and runs in a private network namespace) the host is `localhost`.

Under `srun`, `ClusterSpec.from_env()` uses this automatically when there is no
TF_CONFIG (`SLURMEnvironment`), so the same script runs under `tfdist launch`,
by hand, or in sbatch. Submitting jobs is `tfdist.launch.slurm._launcher`'s job.

Example (inside `srun -n 2 python train.py`):

>>> spec = cluster_spec_from_slurm()
>>> spec.jobs["worker"]
('node1:23456', 'node1:23457')
"""

import os
import re
import shutil
import subprocess
from typing import List, Mapping, Optional

from tfdist import _variables as variables
from tfdist.cluster import environment
from tfdist.cluster import _spec as spec_lib
from tfdist.internals import tensorflow as tf_internals

PORT_BASE_ENV = variables.SLURM_PORT_BASE
RESV_PORTS_ENV = "SLURM_STEP_RESV_PORTS"
NUM_PS_ENV = variables.SLURM_NUM_PS
# Set by tfdist's sbatch script where the tasks share one node's private network.
LOOPBACK_ENV = variables.SLURM_LOOPBACK
_REQUIRED = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
             "SLURM_STEP_TASKS_PER_NODE")


def in_slurm_step(environ: Optional[Mapping[str, str]] = None) -> bool:
  """Whether this process is a task of a SLURM job step (started by srun)."""
  environ = os.environ if environ is None else environ
  return all(name in environ for name in _REQUIRED)


def _expand(environ: Mapping[str, str]):
  nodelist, tasks = environ["SLURM_STEP_NODELIST"], environ["SLURM_STEP_TASKS_PER_NODE"]
  # No TensorFlow to import in the wrapper of every task (`tfdist task` under
  # tfdist's sbatch script): plain names as they are, others by SLURM's own tool.
  if re.fullmatch(r"[^\[\],]+(,[^\[\],]+)*", nodelist):
    nodes = nodelist.split(",")
  else:
    nodes = hostnames(nodelist)
  return nodes, tasks_per_node(tasks)


def hostnames(nodelist: str) -> List[str]:
  """SLURM's compressed host list as names: `scontrol`, else TF's parser (imports TensorFlow).

  Example: `hostnames("n[1-2],m5")` is `["n1", "n2", "m5"]`.
  """
  if shutil.which("scontrol"):  # On every node of a SLURM cluster.
    try:
      names = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                             text=True, timeout=60, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
      names = []
    if names:
      return names
  # TF's own hostlist parsing is right; only its task-to-GPU mapping is not.
  return list(tf_internals.expand_slurm_hostlist(nodelist))


def tasks_per_node(value: str) -> List[int]:
  """SLURM's compressed tasks per node as counts.

  Example: `tasks_per_node("2(x3),1")` is `[2, 2, 2, 1]`.

  Raises:
    ValueError: not such a list.
  """
  counts: List[int] = []
  for part in value.split(","):
    match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
    if match is None:
      raise ValueError("`SLURM_STEP_TASKS_PER_NODE` must be counts like '2(x3),1'. "
                       f"Received: {value!r}")
    counts += [int(match.group(1))] * int(match.group(2) or 1)
  return counts


def port_base(environ: Mapping[str, str]) -> int:
  """First port when SLURM reserves none: `TFDIST_SLURM_PORT_BASE`, else from the job id.

  The job-id fallback lets every task of the job compute the same ports without
  talking to the others, but two jobs sharing a node can collide (consecutive
  job ids overlap with 2+ tasks per node). Configure `MpiParams=ports=...` in
  slurm.conf and SLURM reserves ports per step instead (`reserved_ports`).
  """
  if PORT_BASE_ENV in environ:
    value = environ[PORT_BASE_ENV]
    if not value.isdigit() or not 1024 <= int(value) <= 65000:
      raise ValueError(f"`{PORT_BASE_ENV}` must be a port from 1024 to 65000. "
                       f"Received: {value!r}")
    return int(value)
  job_id = environ.get("SLURM_JOB_ID", "0")
  return 20000 + (int(job_id) if job_id.isdigit() else 0) % 20000


def reserved_ports(environ: Mapping[str, str]) -> Optional[List[int]]:
  """The ports SLURM reserved for this step on every node, or None.

  With `MpiParams=ports=12000-12999` in slurm.conf, srun reserves a range per
  step that no other step on the node gets, and says which in
  `SLURM_STEP_RESV_PORTS` ("12000-12003", or a list like "12000,12005-12006").

  Raises:
    ValueError: the variable is not a port list.
  """
  value = environ.get(RESV_PORTS_ENV, "")
  if not value:
    return None
  ports: List[int] = []
  for part in value.split(","):
    low, _, high = part.partition("-")
    if not low.isdigit() or (high and not high.isdigit()):
      raise ValueError(f"`{RESV_PORTS_ENV}` is not a list of ports or ranges like "
                       f"'12000-12003'. Received: {value!r}")
    ports += range(int(low), int(high or low) + 1)
  return ports


def cluster_spec_from_slurm(environ: Optional[Mapping[str, str]] = None, *,
                            num_ps: Optional[int] = None) -> spec_lib.ClusterSpec:
  """The job step's cluster, seen from this task.

  With `num_ps` (or `TFDIST_SLURM_NUM_PS`) > 0, task 0 is the chief, the next
  `num_ps` tasks are ps and the rest workers (parameter-server training);
  otherwise every task is a worker (multi-worker mirrored).

  Raises:
    RuntimeError: not inside a SLURM job step.
    ValueError: inconsistent SLURM variables or too few tasks for `num_ps`.
  """
  environ = os.environ if environ is None else environ
  missing = [name for name in _REQUIRED if name not in environ]
  if missing:
    raise RuntimeError(
        f"Not inside a SLURM job step: {missing} unset. Start the tasks with srun "
        f"inside sbatch or salloc. Received: SLURM_JOB_ID={environ.get('SLURM_JOB_ID')!r}")
  nodes, per_node = _expand(environ)
  num_tasks = int(environ["SLURM_STEP_NUM_TASKS"])
  if len(nodes) != len(per_node) or sum(per_node) != num_tasks:
    raise ValueError(
        "SLURM's step variables disagree: SLURM_STEP_NODELIST has "
        f"{len(nodes)} node(s) with {per_node} task(s) each but SLURM_STEP_NUM_TASKS is "
        f"{num_tasks}. Received: {environ['SLURM_STEP_NODELIST']!r}, "
        f"{environ['SLURM_STEP_TASKS_PER_NODE']!r}")
  # Ports, in order: tfdist's explicit base, else SLURM's reservation, else the job id.
  reserved = None if PORT_BASE_ENV in environ else reserved_ports(environ)
  if reserved is not None and len(reserved) < max(per_node):
    raise ValueError(
        f"SLURM reserved {len(reserved)} port(s) for this step but a node runs "
        f"{max(per_node)} task(s): widen MpiParams=ports in slurm.conf, or set "
        f"{PORT_BASE_ENV}. Received: {RESV_PORTS_ENV}={environ[RESV_PORTS_ENV]!r}")
  if reserved is None:
    base = port_base(environ)
    reserved = [base + local for local in range(max(per_node))]
  if environ.get(LOOPBACK_ENV) == "1":
    if len(nodes) != 1:
      raise ValueError(f"`{LOOPBACK_ENV}=1` is for a step on one node (its tasks share a "
                       f"private network): unset it. Received: nodes {nodes}")
    nodes = ["localhost"]
  addresses: List[str] = [f"{node}:{reserved[local]}"
                          for node, count in zip(nodes, per_node) for local in range(count)]
  if num_ps is None:
    num_ps = int(environ.get(NUM_PS_ENV, "0") or 0)
  rank = int(environ["SLURM_PROCID"])
  if num_ps:
    if num_tasks < num_ps + 2:
      raise ValueError(
          f"Parameter-server training needs a chief, {num_ps} ps and at least one "
          f"worker: {num_ps + 2} tasks, but the step has {num_tasks}. Ask sbatch for "
          f"--ntasks={num_ps + 2} or more. Received: num_ps={num_ps}")
    jobs = {spec_lib.CHIEF: addresses[:1], spec_lib.PS: addresses[1:1 + num_ps],
            spec_lib.WORKER: addresses[1 + num_ps:]}
    if rank == 0:
      task = spec_lib.TaskSpec(spec_lib.CHIEF, 0)
    elif rank <= num_ps:
      task = spec_lib.TaskSpec(spec_lib.PS, rank - 1)
    else:
      task = spec_lib.TaskSpec(spec_lib.WORKER, rank - 1 - num_ps)
  else:
    jobs = {spec_lib.WORKER: addresses}
    task = spec_lib.TaskSpec(spec_lib.WORKER, rank)
  return spec_lib.ClusterSpec(jobs, task=task)


class SLURMEnvironment(environment.ClusterEnvironment):
  """A task of a SLURM job step of 2 or more tasks (started by srun)."""

  name = "slurm"

  def detect(self, environ: Mapping[str, str]) -> bool:
    return in_slurm_step(environ) and environ["SLURM_STEP_NUM_TASKS"].isdigit() \
        and int(environ["SLURM_STEP_NUM_TASKS"]) > 1

  def cluster_spec(self, environ: Mapping[str, str]) -> spec_lib.ClusterSpec:
    return cluster_spec_from_slurm(environ)
