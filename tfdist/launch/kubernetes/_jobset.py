"""JobSet and Kubeflow Trainer v2 manifests: `tfdist launch --kubernetes=jobset|trainjob`.

Kubeflow Trainer v2 has no TensorFlow runtime, and JobSet sets no
`TF_CONFIG`; these manifests give every pod what `tfdist task` needs to
write it (`tfdist.cluster._jobset`): the pod's JobSet labels through the
downward API, the cluster's shape and its first port. The container runs
`python -m tfdist task -- COMMAND`.

- `jobset(...)`: a JobSet (`jobset.x-k8s.io/v1alpha2`) with one replicated
  job per task type (chief, worker, ps, evaluator), each one Indexed Job of
  as many pods as tasks, under the JobSet's headless Service (stable host
  names `<name>-<type>-0-<i>.<name>`).
- `trainjob(...)`: a `ClusterTrainingRuntime` named `tfdist-tensorflow` (one
  replicated job, "node"; apply it once per cluster) and a `TrainJob` of
  `numNodes` = every task, pod i being the i-th task in TensorFlow's order.

Restarts follow `tfdist launch`'s model: a failed chief, ps or collective
worker fails its Job (`backoffLimit: 0`, `restartPolicy: Never`), and the
JobSet's failure policy restarts the whole job (`RestartJobSet`, at most
`max_restarts` times), so that every task resumes from the backup together.
In a JobSet a parameter-server worker restarts alone, in place
(`restartPolicy: OnFailure`), while the chief reschedules its steps. On a
TrainJob every pod shares one template, so any pod's loss restarts the
whole job. With ps tasks the JobSet succeeds when the chief (and the
evaluator) do: ps and workers stop serving when the chief is done.

Both are closed and hardened as every kind is (`tfdist.launch.kubernetes._pod_security`):
a NetworkPolicy admits the job's own pods only, on ports 2222 up to 2222 +
tasks - 1. The runtime's pod template carries the restricted profile (any
TrainJob's pods); a TrainJob adds its job label and `run_as_user` through
its `runtimePatches` (manager `tfdist`), since the runtime is shared.

Example:

    >>> from tfdist.launch import Job
    >>> docs = jobset(Job(workers=2), ["python", "train.py"],
    ...               kubernetes.ManifestOptions(image="me/train:1", name="mnist"))
    >>> print(kubernetes.to_yaml(docs))    # kubectl apply -f -
"""

import copy
from typing import Dict, List, Mapping, Optional, Sequence

from tfdist import cluster as cluster_lib
from tfdist.cluster import _jobset as jobset_environment
from tfdist.launch.kubernetes import _manifests as kubernetes
from tfdist.launch import _launcher as launcher_lib
from tfdist.launch.kubernetes import _pod_security as pod_security

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
RUNTIME = "tfdist-tensorflow"
PORT = jobset_environment.DEFAULT_PORT
# How Trainer v2 finds the container its TrainJob's `trainer` fields patch.
_TRAINER_STEP = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
_TASK = kubernetes.TASK  # Every kind's pods run their command under `tfdist task`.
PATCH_MANAGER = "tfdist"


def _checked_counts(job: launcher_lib.Job, command: Sequence[str]) -> Dict[str, int]:
  """Task type -> count, once the command is checked."""
  kubernetes.check(command)
  counts = kubernetes.counts(job.workers, job.ps, job.chief)
  if job.evaluator:
    counts[cluster_lib.EVALUATOR] = 1
  return counts


def _label_env() -> List[dict]:
  """The pod's JobSet labels, through the downward API, as `tfdist task` reads them."""
  return [{"name": env, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{label}']"}}}
          for env, label in jobset_environment.LABELS.items()]


def _job_env(counts: Mapping[str, int], options: kubernetes.ManifestOptions,
             data_workers: int) -> List[dict]:
  """The job's own variables: its shape, its first port, tfdist's and the tf.data service's."""
  return [
      {"name": jobset_environment.SHAPE_ENV, "value": jobset_environment.shape_text(counts)},
      {"name": jobset_environment.PORT_ENV, "value": str(PORT)},
      *kubernetes.task_env(options),
      *kubernetes.trainer_env(options.name, options.namespace, data_workers)]


def _failure_policy(max_restarts: int) -> dict:
  return {"maxRestarts": max_restarts,
          "rules": [{"name": "restartFromTheBackup", "action": "RestartJobSet"}]}


def jobset(job: launcher_lib.Job, command: Sequence[str],
           options: kubernetes.ManifestOptions) -> List[dict]:
  """A JobSet with a replicated job per task type, its NetworkPolicy (and the tf.data service's).

  Raises:
    ValueError: a bad command or count.
  """
  counts = _checked_counts(job, command)
  name, namespace, image, ps = options.name, options.namespace, options.image, job.ps
  env = _label_env() + _job_env(counts, options, job.data_workers)
  replicated = []
  for task_type, n in counts.items():
    # A ps worker restarts alone, in place; any other task restarts the job.
    alone = bool(ps) and task_type == cluster_lib.WORKER
    container = {"name": "tensorflow", "image": image, "command": _TASK + list(command),
                 "env": copy.deepcopy(env)}  # Not shared: YAML would write an anchor.
    replicated.append({"name": task_type, "replicas": 1, "template": {"spec": {
        "completionMode": "Indexed", "completions": n, "parallelism": n,
        "backoffLimit": kubernetes.BACKOFF_LIMIT if alone else 0,
        "template": {"metadata": {"labels": pod_security.job_labels(name)},
                     "spec": pod_security.harden(
                         {"restartPolicy": "OnFailure" if alone else "Never",
                          "containers": [container]}, run_as_user=options.run_as_user)}}}})
  finish = [t for t in (cluster_lib.CHIEF, cluster_lib.EVALUATOR) if t in counts] if ps else []
  docs = [{"apiVersion": JOBSET_API, "kind": "JobSet",
           "metadata": {"name": name, "namespace": namespace,
                        "labels": {"app.kubernetes.io/managed-by": "tfdist"}},
           "spec": {"network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                    "failurePolicy": _failure_policy(options.max_restarts),
                    "successPolicy": {"operator": "All", **(
                        {"targetReplicatedJobs": finish} if finish else {})},
                    "replicatedJobs": replicated}}]
  return docs + kubernetes.extra_manifests(job, options, task_ports=sum(counts.values()))


def training_runtime(*, image: str, max_restarts: int = 3) -> dict:
  """The `ClusterTrainingRuntime` tfdist's TrainJobs use: one replicated job, "node"."""
  container = {"name": "node", "image": image, "env": _label_env()}
  return {"apiVersion": TRAINER_API, "kind": "ClusterTrainingRuntime",
          "metadata": {"name": RUNTIME, "labels": {"app.kubernetes.io/managed-by": "tfdist"}},
          "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {
              "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
              "failurePolicy": _failure_policy(max_restarts),
              "replicatedJobs": [{"name": jobset_environment.TRAINJOB_REPLICATED_JOB,
                                  "replicas": 1,
                                  "template": {"metadata": {"labels": dict(_TRAINER_STEP)},
                                               "spec": {"backoffLimit": 0, "template": {
                                                   "spec": pod_security.harden(
                                                       {"restartPolicy": "Never",
                                                        "containers": [container]})}}}}]}}}}


def trainjob(job: launcher_lib.Job, command: Sequence[str],
             options: kubernetes.ManifestOptions) -> List[dict]:
  """tfdist's runtime, a `TrainJob` of every task, its NetworkPolicy (and the tf.data service's).

  Raises:
    ValueError: a bad command or count.
  """
  counts = _checked_counts(job, command)
  name, namespace, image = options.name, options.namespace, options.image
  # The runtime's container has the labels; the TrainJob adds what is this job's.
  env = _job_env(counts, options, job.data_workers)
  docs = [training_runtime(image=image, max_restarts=options.max_restarts),
          {"apiVersion": TRAINER_API, "kind": "TrainJob",
           "metadata": {"name": name, "namespace": namespace,
                        "labels": {"app.kubernetes.io/managed-by": "tfdist"}},
           "spec": {"runtimeRef": {"name": RUNTIME, "apiGroup": "trainer.kubeflow.org",
                                   "kind": "ClusterTrainingRuntime"},
                    "trainer": {"image": image, "command": _TASK + list(command),
                                "numNodes": sum(counts.values()), "env": env},
                    "runtimePatches": [_runtime_patch(name, options.run_as_user)]}}]
  return docs + kubernetes.extra_manifests(job, options, task_ports=sum(counts.values()))


def _runtime_patch(name: str, run_as_user: Optional[int]) -> dict:
  """The TrainJob's own part of its pods, on the shared runtime: its label, its user id."""
  pod = {"metadata": {"labels": pod_security.job_labels(name)}}
  if run_as_user is not None:
    pod["spec"] = {"securityContext": {"runAsUser": run_as_user}}
  return {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {
      "replicatedJobs": [{"name": jobset_environment.TRAINJOB_REPLICATED_JOB,
                          "template": {"spec": {"template": pod}}}]}}}}


def pods(docs: List[dict]) -> List[dict]:
  """Every pod a JobSet or TrainJob of `docs` makes, as Kubernetes would start it.

  Each is a dict: `host` (its stable host name), `fqdn` (with the
  subdomain), `command`, `env` (its container's variables, the downward API
  and `JOB_COMPLETION_INDEX` resolved), `restart_policy` and `replicated_job`.
  For a test that runs the pods as processes, or a user who wants to see them.
  """
  runtime = next((d for d in docs if d["kind"] == "ClusterTrainingRuntime"), None)
  found = []
  for doc in docs:
    if doc["kind"] == "JobSet":
      spec, command, extra_env, nodes = doc["spec"], None, [], None
    elif doc["kind"] == "TrainJob":
      spec = runtime["spec"]["template"]["spec"]
      trainer = doc["spec"]["trainer"]
      command, extra_env, nodes = trainer["command"], trainer["env"], trainer["numNodes"]
    else:
      continue
    name = doc["metadata"]["name"]
    subdomain = spec.get("network", {}).get("subdomain", name)
    for replicated in spec["replicatedJobs"]:
      job = replicated["template"]["spec"]
      pod = job["template"]["spec"]
      (container,) = pod["containers"]
      labels = {"jobset.sigs.k8s.io/jobset-name": name,
                "jobset.sigs.k8s.io/replicatedjob-name": replicated["name"],
                "jobset.sigs.k8s.io/job-index": "0"}
      for i in range(nodes if nodes is not None else job["completions"]):
        env = {jobset_environment.POD_INDEX_ENV: str(i)}
        for variable in container.get("env", []) + extra_env:
          field = variable.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
          env[variable["name"]] = labels[field[len("metadata.labels['"):-2]] if field \
              else variable["value"]
        host = f"{name}-{replicated['name']}-0-{i}"
        found.append({"host": host, "fqdn": f"{host}.{subdomain}",
                      "command": list(command or container["command"]), "env": env,
                      "restart_policy": pod["restartPolicy"],
                      "replicated_job": replicated["name"]})
  return found

