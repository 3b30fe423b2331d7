"""JobSet and Kubeflow Trainer v2 pods: the task from the pod's JobSet labels.

A JobSet (`jobset.x-k8s.io/v1alpha2`) runs one Indexed Job per replicated
job and labels every pod with its JobSet, replicated job and job index; the
Job controller sets `JOB_COMPLETION_INDEX`. Neither sets `TF_CONFIG`. The
manifests `tfdist launch --kubernetes=jobset|trainjob` writes hand the labels
to the container through the downward API, plus the cluster's shape
(`TFDIST_CLUSTER_SHAPE`, e.g. "chief=1,worker=2,ps=1") and its first port
(`TFDIST_PORT`); the container runs the command through `tfdist task`,
which writes `TF_CONFIG` from them.

- `JobSetEnvironment`: one replicated job per task type (chief, worker, ps,
  evaluator), each one Job of as many pods as tasks; task (type, i) is pod
  `<jobset>-<type>-0-<i>.<subdomain>` (the subdomain is the JobSet's name
  unless `JOBSET_SUBDOMAIN` says otherwise).
- `TrainJobEnvironment`: a TrainJob on a plainML runtime has one replicated
  job, "node", of `numNodes` pods, `<trainjob>-node-0-<i>.<trainjob>`;
  pod i is the i-th task in the order chief, workers, ps, evaluator.

Every task listens on its own port, `TFDIST_PORT` + its place in that order,
so that tasks sharing a node's network (hostNetwork) cannot collide.
"""

from typing import Dict, List, Mapping, Tuple

from tfdist import _variables as variables
from tfdist.cluster import environment
from tfdist.cluster import _spec as spec_lib

# What the manifest's downward API and the Job controller give the container.
JOBSET_NAME_ENV = "JOBSET_NAME"  # Label jobset.sigs.k8s.io/jobset-name.
REPLICATED_JOB_ENV = "JOBSET_REPLICATED_JOB"  # Label jobset.sigs.k8s.io/replicatedjob-name.
JOB_INDEX_ENV = "JOBSET_JOB_INDEX"  # Label jobset.sigs.k8s.io/job-index.
POD_INDEX_ENV = "JOB_COMPLETION_INDEX"
SUBDOMAIN_ENV = "JOBSET_SUBDOMAIN"
SHAPE_ENV = variables.CLUSTER_SHAPE
PORT_ENV = variables.PORT
DEFAULT_PORT = 2222
LABELS = {JOBSET_NAME_ENV: "jobset.sigs.k8s.io/jobset-name",
          REPLICATED_JOB_ENV: "jobset.sigs.k8s.io/replicatedjob-name",
          JOB_INDEX_ENV: "jobset.sigs.k8s.io/job-index"}
# Trainer v2's plainML runtimes name their one replicated job so.
TRAINJOB_REPLICATED_JOB = "node"


def shape_text(counts: Mapping[str, int]) -> str:
  """`TFDIST_CLUSTER_SHAPE` for task counts: "chief=1,worker=2" (in TensorFlow's order)."""
  return ",".join(f"{t}={counts[t]}" for t in spec_lib.TASK_TYPES if counts.get(t))


def parse_shape(text: str) -> Dict[str, int]:
  """Task type -> count, from `TFDIST_CLUSTER_SHAPE`.

  Raises:
    ValueError: not "type=count[,type=count...]" with known types and >= 1 worker.
  """
  counts: Dict[str, int] = {}
  for part in text.split(","):
    task_type, _, count = part.strip().partition("=")
    if task_type not in spec_lib.TASK_TYPES or not count.isdigit() or task_type in counts:
      counts = {}
      break
    counts[task_type] = int(count)
  if not counts.get(spec_lib.WORKER) and not counts.get(spec_lib.CHIEF) or \
      counts.get(spec_lib.CHIEF, 0) > 1 or counts.get(spec_lib.EVALUATOR, 0) > 1:
    raise ValueError(
        f"`{SHAPE_ENV}` must give each task type's count once, as type=count joined by ',', "
        f"types from {list(spec_lib.TASK_TYPES)}, at most one chief and one evaluator, e.g. "
        f"'chief=1,worker=2,ps=1'. Received: {text!r}")
  return counts


def ordered_tasks(counts: Mapping[str, int]) -> List[spec_lib.TaskSpec]:
  """Every task in TensorFlow's order (chief, workers, ps, evaluator)."""
  return [spec_lib.TaskSpec(t, i) for t in spec_lib.TASK_TYPES for i in range(counts.get(t, 0))]


def _index(environ: Mapping[str, str], name: str) -> int:
  value = environ.get(name, "")
  if not value.isdigit():
    raise ValueError(f"`{name}` must be an integer >= 0 (in a pod: "
                     f"{LABELS.get(name, 'the Job controller sets it')}). Received: {value!r}")
  return int(value)


class JobSetEnvironment(environment.ClusterEnvironment):
  """A pod of a JobSet whose replicated jobs are the task types (`tfdist launch --kubernetes=jobset`)."""

  name = "jobset"

  def detect(self, environ: Mapping[str, str]) -> bool:
    return bool(environ.get(SHAPE_ENV)) and bool(environ.get(JOBSET_NAME_ENV)) and \
        environ.get(REPLICATED_JOB_ENV) != TRAINJOB_REPLICATED_JOB

  def host(self, environ: Mapping[str, str], task: spec_lib.TaskSpec, ordinal: int) -> str:
    """The stable host name of `task` (its `ordinal` in TensorFlow's order)."""
    del ordinal
    jobset = environ[JOBSET_NAME_ENV]
    return f"{jobset}-{task.type}-0-{task.index}.{environ.get(SUBDOMAIN_ENV) or jobset}"

  def task(self, environ: Mapping[str, str], tasks: List[spec_lib.TaskSpec]) -> spec_lib.TaskSpec:
    """This pod's task."""
    task_type = environ.get(REPLICATED_JOB_ENV, "")
    counts = {t.type: t.index + 1 for t in tasks}
    if task_type not in counts:
      raise ValueError(
          f"`{REPLICATED_JOB_ENV}` (label {LABELS[REPLICATED_JOB_ENV]}) must name one of the "
          f"cluster's task types {sorted(counts)}: tfdist's JobSets have one replicated job "
          f"per task type. Received: {task_type!r}")
    if _index(environ, JOB_INDEX_ENV) != 0:
      raise ValueError(
          f"`{JOB_INDEX_ENV}` must be 0: each replicated job is one Job (replicas: 1) of as "
          f"many pods as tasks (parallelism and completions). Received: "
          f"{environ[JOB_INDEX_ENV]!r} in replicated job {task_type!r}")
    index = _index(environ, POD_INDEX_ENV)
    if index >= counts[task_type]:
      raise ValueError(f"`{POD_INDEX_ENV}` must be below the {counts[task_type]} {task_type} "
                       f"task(s) of `{SHAPE_ENV}`. Received: {index}")
    return spec_lib.TaskSpec(task_type, index)

  def cluster_spec(self, environ: Mapping[str, str]) -> spec_lib.ClusterSpec:
    tasks = ordered_tasks(parse_shape(environ[SHAPE_ENV]))
    port = _index(environ, PORT_ENV) if PORT_ENV in environ else DEFAULT_PORT
    jobs: Dict[str, List[str]] = {}
    for ordinal, task in enumerate(tasks):
      if task.type != spec_lib.EVALUATOR:
        jobs.setdefault(task.type, []).append(f"{self.host(environ, task, ordinal)}:"
                                              f"{port + ordinal}")
    return spec_lib.ClusterSpec(jobs, task=self.task(environ, tasks),
                                has_evaluator=any(t.type == spec_lib.EVALUATOR for t in tasks))


class TrainJobEnvironment(JobSetEnvironment):
  """A pod of a Kubeflow Trainer v2 TrainJob on tfdist's runtime (`--kubernetes=trainjob`)."""

  name = "trainjob"

  def detect(self, environ: Mapping[str, str]) -> bool:
    return bool(environ.get(SHAPE_ENV)) and bool(environ.get(JOBSET_NAME_ENV)) and \
        environ.get(REPLICATED_JOB_ENV) == TRAINJOB_REPLICATED_JOB

  def host(self, environ: Mapping[str, str], task: spec_lib.TaskSpec, ordinal: int) -> str:
    trainjob = environ[JOBSET_NAME_ENV]  # The JobSet is named after its TrainJob.
    return f"{trainjob}-{TRAINJOB_REPLICATED_JOB}-0-{ordinal}." \
           f"{environ.get(SUBDOMAIN_ENV) or trainjob}"

  def task(self, environ: Mapping[str, str], tasks: List[spec_lib.TaskSpec]) -> spec_lib.TaskSpec:
    index = _index(environ, POD_INDEX_ENV)
    if index >= len(tasks):
      raise ValueError(
          f"`{POD_INDEX_ENV}` must be below the TrainJob's {len(tasks)} nodes, one per task of "
          f"`{SHAPE_ENV}` ({environ[SHAPE_ENV]!r}): give the TrainJob numNodes={len(tasks)}. "
          f"Received: {index}")
    return tasks[index]


def pod_names(jobset: str, counts: Mapping[str, int], *,
              trainjob: bool = False) -> List[Tuple[spec_lib.TaskSpec, str]]:
  """(task, pod host name without the subdomain) for every task, in TensorFlow's order."""
  tasks = ordered_tasks(counts)
  if trainjob:
    return [(t, f"{jobset}-{TRAINJOB_REPLICATED_JOB}-0-{i}") for i, t in enumerate(tasks)]
  return [(t, f"{jobset}-{t.type}-0-{t.index}") for t in tasks]
