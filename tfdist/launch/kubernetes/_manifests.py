"""Kubernetes manifests for a TF cluster: a Kubeflow TFJob, or plain Indexed Jobs.

(JobSets and Kubeflow Trainer v2 TrainJobs, which restart a whole job from its
backup: `tfdist.launch.kubernetes._jobset`.)

Both come from the same task counts, and `pod_tf_configs` tells what TF_CONFIG
each pod gets, so that a test (or a curious user) can check them without a cluster.

- `tfjob(...)`: Kubeflow's TFJob (Chief/Worker/PS replicas); the training
  operator writes TF_CONFIG into every pod itself.
- `indexed_jobs(...)`: one Indexed Job per task type plus a headless Service, for
  clusters without Kubeflow (TFJob is deprecated in Kubeflow Trainer v2). Each pod
  builds its TF_CONFIG from its `JOB_COMPLETION_INDEX` and the cluster's template
  (`tfdist.cluster._kubernetes`).

Every task's container runs `python -m tfdist task -- COMMAND` (`TASK`), as
JobSet pods do: `tfdist task` gives the command its TF_CONFIG and the image's
task site first on PYTHONPATH (Keras 3's own callbacks write once, a task that
would train alone is told; `tfdist.launch.TASK_SITE_DIR`), and in a job of
two or more training tasks watches it for stalls (`tfdist.launch.watchdog`).
The image needs tfdist.

Nothing from this machine's environment goes into a manifest: only the image,
command, TF_CONFIG and the preflight's deadline.

Restarts follow `tfdist launch`'s model as far as Kubernetes can (see
`restart_policy`): under collectives every worker restarts in place when it
fails, and the peers of a lost worker fail within seconds and restart too, so
all resume from the backup together; under parameter servers a worker
restarts alone while the chief reschedules its steps, and a failed chief or ps
fails the job (resubmit it to resume from the backup). Tasks wait
`PREFLIGHT_TIMEOUT_SECONDS` for their peers, since pods start minutes apart
on a busy cluster.

With ps tasks, ps and worker pods only serve; each exits with 0 within seconds
of the chief's end (`tfdist.strategies._servers.serve` watches the chief), so their Jobs
complete when training does, with no success policy needed. Indexed Jobs need
Kubernetes 1.24 or newer (Indexed completion mode is GA there); the TFJob needs
Kubeflow's training operator.

With data workers (`data_workers=N`, `tfdist launch --kubernetes=... --data_workers N`),
a tf.data service runs beside either kind: a dispatcher and N data workers,
each a StatefulSet pod with a stable DNS name under a headless Service (a
data worker must come back at the address the dispatcher knows), running
`python -m tfdist data_service` from the same image. Every trainer gets
`TFDIST_DATA_SERVICE` and `TFDIST_DATA_SERVICE_JOB`. With `data_work_dir`
the dispatcher journals to an emptyDir volume, which survives container
restarts (not the pod's move to another node: mount a volume of yours
there for that). Delete the StatefulSets when training is done: servers
never finish by themselves.

Every kind is closed and hardened (`tfdist.launch.kubernetes._pod_security`): each pod
carries the label `tfdist/job: <name>`, a NetworkPolicy admits ingress to
them only from pods of the same job (`network_policy=False`,
`--network_policy=none`, leaves it out), and every container runs under the
"restricted" Pod Security profile with a read-only root file system and an
emptyDir on /tmp (`run_as_user` for an image without a non-root USER).

Example:

    >>> from tfdist.launch import Job
    >>> docs = indexed_jobs(Job(workers=2), ["python", "train.py"],
    ...                     ManifestOptions(image="me/train:1", name="mnist"))
    >>> print(to_yaml(docs))          # kubectl apply -f -
"""

import dataclasses
import json
import logging
import re
import sys
from typing import Dict, List, Mapping, Optional, Sequence

from tfdist import _variables as variables
from tfdist.cluster import _data_service as data_service_lib
from tfdist.cluster import _kubernetes as kubernetes_environment
from tfdist import cluster as cluster_lib
from tfdist.cluster import _spec as spec_lib
from tfdist.launch import _launcher as launcher_lib
from tfdist.launch.kubernetes import _pod_security as pod_security
from tfdist.task import _keras as task_keras

PORT = 2222  # The port the TFJob operator uses; kept the same for Indexed Jobs.
# Pods of a job are scheduled, pulled and restarted minutes apart on a busy
# cluster (CrashLoopBackOff waits up to 5 min): each task waits this long for its
# peers before the preflight gives up, instead of tfdist's 30 s for one machine.
PREFLIGHT_TIMEOUT_SECONDS = 600
# Container restarts per Job before it fails (Kubernetes' own default).
BACKOFF_LIMIT = 6
DATA_PORT = 5050  # Every tf.data service server listens here, in its own pod.
_JOURNAL = "/var/run/tfdist-data-journal"
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,40}[a-z0-9])?$")
_TFJOB_TYPES = {cluster_lib.CHIEF: "Chief", cluster_lib.WORKER: "Worker",
                cluster_lib.PS: "PS"}
# What every task's container runs its command under (see the module doc).
TASK = ["python", "-m", "tfdist", "task", "--"]
# Kubernetes's own namespace of this name (not tfdist's "default" strategy).
NAMESPACE = "default"


def counts(workers: int, ps: int, chief: bool) -> Dict[str, int]:
  """Task type -> count, for the types the job has; raises ValueError for a bad count."""
  spec_lib.check_task_count("workers", workers, 1)
  spec_lib.check_task_count("ps", ps, 0)
  counts = {cluster_lib.CHIEF: int(bool(chief)), cluster_lib.WORKER: workers,
            cluster_lib.PS: ps}
  return {job: n for job, n in counts.items() if n}


@dataclasses.dataclass(frozen=True)
class ManifestOptions:
  """What every manifest kind takes besides the `Job` and its command.

  Raises:
    ValueError: a name, image, run_as_user or max_restarts no manifest can take.
  """

  image: str
  name: str = "tfdist"
  namespace: str = NAMESPACE
  keras: Optional[str] = None  # None: tf_keras (`task_keras.resolve`).
  data_journal: bool = False  # The tf.data dispatcher journals to its pod's volume.
  run_as_user: Optional[int] = None  # For an image without a non-root USER.
  network_policy: bool = True  # Admit only the job's own pods (`pod_security`).
  max_restarts: int = 3  # JobSet and TrainJob: whole-job restarts from the backup.
  # Variables every task's container gets beside tfdist's own: `tfdist launch`'s
  # --stall_timeout, --trains_alone and --profile, which `tfdist task` and the task
  # site read in the pod. Never this machine's environment.
  env: Mapping[str, str] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    _check_name_and_image(self.name, self.image)
    pod_security.check_run_as_user(self.run_as_user)
    spec_lib.check_task_count("max_restarts", self.max_restarts, 0)


def check(command: Sequence[str]) -> None:
  """Raises ValueError for a command no manifest can take."""
  if not command or isinstance(command, str):
    raise ValueError("`command` must be a non-empty list, e.g. ['python', 'train.py']. "
                     f"Received: {command!r}")


def _check_name_and_image(name: str, image: str) -> None:
  if not isinstance(name, str) or not _NAME.match(name):
    raise ValueError(
        "`name` must be a DNS label: lower-case letters, digits and '-', starting with "
        f"a letter, at most 42 characters, e.g. 'mnist-train'. Received: {name!r}")
  if not image:
    raise ValueError(f"`image` is empty: give the container image that holds your code, "
                     f"e.g. 'registry.example.com/train:1'. Received: {image!r}")


def tfjob_cluster(name: str, *, workers: int, ps: int = 0, chief: bool = False,
                  namespace: str = NAMESPACE) -> cluster_lib.ClusterSpec:
  """The cluster the TFJob operator puts in TF_CONFIG: one Service per pod."""
  jobs = {job: [f"{name}-{job}-{i}.{namespace}.svc:{PORT}" for i in range(n)]
          for job, n in counts(workers, ps, chief).items()}
  return cluster_lib.ClusterSpec(jobs)


def indexed_cluster(name: str, *, workers: int, ps: int = 0, chief: bool = False,
                    namespace: str = NAMESPACE) -> cluster_lib.ClusterSpec:
  """The cluster of `indexed_jobs`: pod `<name>-<type>-<i>` under the headless Service."""
  jobs = {job: [f"{name}-{job}-{i}.{name}.{namespace}.svc:{PORT}" for i in range(n)]
          for job, n in counts(workers, ps, chief).items()}
  return cluster_lib.ClusterSpec(jobs)


def restart_policy(job: str, ps: int) -> str:
  """The pod restart policy of a task type: OnFailure, or Never where a restart cannot help.

  Under parameter servers the ps and worker tasks stop serving once the chief is
  gone (`tfdist.strategies._servers.serve`), so a restarted chief would find nobody to
  train with, and a restarted ps has lost its variables: both fail the job.
  """
  if ps and job in (cluster_lib.CHIEF, cluster_lib.PS):
    return "Never"
  return "OnFailure"


def task_env(options: ManifestOptions) -> List[dict]:
  """What every task's container gets from tfdist: the preflight's deadline, the Keras
  switch, and the options' own `env`."""
  # Only the Keras switch: `tfdist task` in the pod puts the image's task site on
  # PYTHONPATH (a path of this machine's tfdist would not be the image's).
  legacy = task_keras.variables(options.keras, {})[task_keras.LEGACY_KERAS_ENV]
  return [{"name": variables.PREFLIGHT_TIMEOUT, "value": str(PREFLIGHT_TIMEOUT_SECONDS)},
          {"name": task_keras.LEGACY_KERAS_ENV, "value": legacy},
          *({"name": k, "value": v} for k, v in sorted(options.env.items()))]


def _container(command: Sequence[str], options: ManifestOptions,
               env: Sequence[dict] = ()) -> dict:
  env = [*task_env(options), *env]
  return {"name": "tensorflow", "image": options.image, "command": TASK + list(command),
          "ports": [{"name": "tfjob-port", "containerPort": PORT}], "env": env}


def data_service_spec(name: str, *, data_workers: int, namespace: str = NAMESPACE,
                      work_dir: Optional[str] = None) -> data_service_lib.DataServiceSpec:
  """The tf.data service of `data_service`: stable pod names under `<name>-data`."""
  pod = lambda role, i: f"{name}-data-{role}-{i}.{name}-data.{namespace}.svc:{DATA_PORT}"
  data_service_lib.check_data_workers(data_workers)
  return data_service_lib.DataServiceSpec(
      pod("dispatcher", 0), tuple(pod("worker", i) for i in range(data_workers)), work_dir)


def data_service(name: str, *, image: str, data_workers: int, namespace: str = NAMESPACE,
                 journal: bool = False, run_as_user: Optional[int] = None) -> List[dict]:
  """A headless Service and two StatefulSets: the dispatcher and `data_workers` data workers.

  Their pods carry job `name`'s label and are hardened (`pod_security.harden`).
  """
  service = data_service_spec(name, data_workers=data_workers, namespace=namespace)
  labels = {"app.kubernetes.io/name": f"{name}-data", "app.kubernetes.io/managed-by": "tfdist"}
  server = ["python", "-m", "tfdist", "data_service", f"--port={DATA_PORT}"]
  docs = [{"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": f"{name}-data", "namespace": namespace, "labels": dict(labels)},
           "spec": {"clusterIP": "None", "selector": dict(labels),
                    "publishNotReadyAddresses": True,
                    "ports": [{"name": "tf-data", "port": DATA_PORT}]}}]
  dispatcher = server + ["--role=dispatcher"] + ([f"--work_dir={_JOURNAL}"] if journal else [])
  # A worker registers under its pod's DNS name, which a restarted pod keeps.
  worker = ["/bin/sh", "-c", 'exec "$@" --worker_address="$(hostname).' + f'{name}-data.'
            f'{namespace}.svc:{DATA_PORT}"', "tfdist", *server, "--role=worker",
            f"--dispatcher_address={service.dispatcher}"]
  for role, replicas, command in (("dispatcher", 1, dispatcher),
                                  ("worker", data_workers, worker)):
    pod_labels = {**labels, "tfdist/data-role": role}
    template_labels = {**pod_labels, **pod_security.job_labels(name)}
    container = {"name": "tf-data", "image": image, "command": command,
                 "ports": [{"name": "tf-data", "containerPort": DATA_PORT}]}
    volumes = []
    if role == "dispatcher" and journal:
      container["volumeMounts"] = [{"name": "journal", "mountPath": _JOURNAL}]
      volumes = [{"name": "journal", "emptyDir": {}}]
    docs.append({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": f"{name}-data-{role}", "namespace": namespace,
                     "labels": dict(labels)},
        "spec": {"serviceName": f"{name}-data", "replicas": replicas,
                 "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": pod_labels},
                 "template": {"metadata": {"labels": template_labels},
                              "spec": pod_security.harden(
                                  {"containers": [container],
                                   **({"volumes": volumes} if volumes else {})},
                                  run_as_user=run_as_user)}},
    })
  return docs


def trainer_env(name: str, namespace: str, data_workers: int) -> List[dict]:
  """A trainer's variables for the tf.data service of `data_service` (none without data workers)."""
  if not data_workers:
    return []
  service = data_service_spec(name, data_workers=data_workers, namespace=namespace)
  # One job name per manifest: pods restarted in place read the same jobs.
  return [{"name": k, "value": v} for k, v in service.environment(name).items()]


def no_evaluator(kind: str, job: launcher_lib.Job) -> None:
  """Raises ValueError for an evaluator on a kind that has none (TFJob, Indexed Jobs)."""
  if job.evaluator:
    raise ValueError(f"--kubernetes={kind} has no evaluator; use --kubernetes=jobset. "
                     "Received: evaluator=True")


def tfjob(job: launcher_lib.Job, command: Sequence[str],
          options: ManifestOptions) -> List[dict]:
  """A Kubeflow TFJob manifest and its NetworkPolicy (and the tf.data service's, if asked for).

  Raises:
    ValueError: a bad command or count, or an evaluator.
  """
  check(command)
  no_evaluator("tfjob", job)
  name, specs = options.name, {}
  env = trainer_env(name, options.namespace, job.data_workers)
  for task_type, n in counts(job.workers, job.ps, job.chief).items():
    specs[_TFJOB_TYPES[task_type]] = {
        "replicas": n,
        "restartPolicy": restart_policy(task_type, job.ps),
        "template": {"metadata": {"labels": pod_security.job_labels(name)},
                     "spec": pod_security.harden(
                         {"containers": [_container(command, options, env)]},
                         run_as_user=options.run_as_user)},
    }
  docs = [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
           "metadata": {"name": name, "namespace": options.namespace},
           "spec": {"runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": BACKOFF_LIMIT},
                    "tfReplicaSpecs": specs}}]
  return docs + extra_manifests(job, options, task_ports=1)


def extra_manifests(job: launcher_lib.Job, options: ManifestOptions, *,
                    task_ports: int) -> List[dict]:
  """What every kind adds to its tasks: the tf.data service's manifests, the NetworkPolicy.

  The policy admits the job's own pods to its `task_ports` ports from `PORT`
  on, and to `DATA_PORT` when a tf.data service runs.
  """
  docs = []
  if job.data_workers:
    docs += data_service(options.name, image=options.image, data_workers=job.data_workers,
                         namespace=options.namespace, journal=options.data_journal,
                         run_as_user=options.run_as_user)
  if options.network_policy:
    ports = [(PORT, PORT + task_ports - 1)] + ([(DATA_PORT,) * 2] if job.data_workers else [])
    docs.append(pod_security.network_policy(options.name, options.namespace, ports))
  return docs


def indexed_jobs(job: launcher_lib.Job, command: Sequence[str],
                 options: ManifestOptions) -> List[dict]:
  """A headless Service, one Indexed Job per task type, a NetworkPolicy (and the tf.data service's).

  Raises:
    ValueError: a bad command or count, or an evaluator.
  """
  check(command)
  no_evaluator("indexed", job)
  name, namespace, ps = options.name, options.namespace, job.ps
  spec = indexed_cluster(name, workers=job.workers, ps=ps, chief=job.chief, namespace=namespace)
  labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "tfdist"}
  docs = [{"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
           "spec": {"clusterIP": "None", "selector": dict(labels),
                    # Peers must resolve before they are "ready": they wait for each other.
                    "publishNotReadyAddresses": True,
                    "ports": [{"name": "tfjob-port", "port": PORT}]}}]
  for task_type, addresses in spec.jobs.items():
    template = json.dumps({"cluster": spec.as_dict(), "task": {"type": task_type, "index": 0}})
    template = template.replace('"index": 0}',
                                f'"index": {kubernetes_environment.INDEX_PLACEHOLDER}}}')
    n = len(addresses)
    docs.append({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": f"{name}-{task_type}", "namespace": namespace,
                     "labels": dict(labels)},
        "spec": {
            "completionMode": "Indexed", "completions": n, "parallelism": n,
            # Restarts happen in place, so a pod keeps its name and address.
            "backoffLimit": BACKOFF_LIMIT if restart_policy(task_type, ps) == "OnFailure" else 0,
            "template": {
                "metadata": {"labels": {**labels, **pod_security.job_labels(name)}},
                "spec": pod_security.harden({
                    "subdomain": name,  # Pod <name>-<job>-<i> resolves under the Service.
                    "restartPolicy": restart_policy(task_type, ps),
                    # `tfdist task` fills the pod's index into the template.
                    "containers": [_container(
                        command, options,
                        env=[{"name": kubernetes_environment.TEMPLATE_ENV, "value": template},
                             *trainer_env(name, namespace, job.data_workers)])],
                }, run_as_user=options.run_as_user),
            },
        },
    })
  return docs + extra_manifests(job, options, task_ports=1)


def pod_tf_configs(docs: List[dict]) -> Dict[str, dict]:
  """Pod name -> the TF_CONFIG it gets, computed from the manifests alone.

  For a TFJob, what the training operator writes; for Indexed Jobs, what
  `tfdist task` in the container builds from its index.
  """
  configs = {}
  for doc in docs:
    if doc["kind"] == "TFJob":
      name, namespace = doc["metadata"]["name"], doc["metadata"]["namespace"]
      replicas = {t: s["replicas"] for t, s in doc["spec"]["tfReplicaSpecs"].items()}
      job_of = {v: k for k, v in _TFJOB_TYPES.items()}
      cluster = {job_of[t]: [f"{name}-{job_of[t]}-{i}.{namespace}.svc:{PORT}"
                             for i in range(n)] for t, n in replicas.items()}
      for t, n in replicas.items():
        for i in range(n):
          configs[f"{name}-{job_of[t]}-{i}"] = {"cluster": cluster,
                                                "task": {"type": job_of[t], "index": i}}
    elif doc["kind"] == "Job":
      spec = doc["spec"]
      container = spec["template"]["spec"]["containers"][0]
      template = next(e["value"] for e in container["env"]
                      if e["name"] == kubernetes_environment.TEMPLATE_ENV)
      for i in range(spec["completions"]):
        configs[f"{doc['metadata']['name']}-{i}"] = json.loads(
            kubernetes_environment.fill_template(template, str(i)))
  return configs


def to_yaml(docs: List[dict]) -> str:
  """The manifests as one multi-document YAML string."""
  import yaml  # Deferred: only manifest output needs PyYAML.
  return yaml.safe_dump_all(docs, sort_keys=False)


# tfdist.launch.kubernetes._jobset adds "jobset" and "trainjob", which restart the whole job.
MANIFESTS = {"tfjob": tfjob, "indexed": indexed_jobs}


class KubernetesLauncher(launcher_lib.Launcher):
  """Writes the job's manifests (JobSet, TrainJob, TFJob or Indexed Jobs) for `kubectl apply -f -`; runs nothing."""

  name = "kubernetes"

  def __init__(self, options: Optional[launcher_lib.LaunchOptions] = None, *,
               kind: str = "indexed", image: str, name: str = "tfdist",
               namespace: str = NAMESPACE, run_as_user: Optional[int] = None,
               network_policy: bool = True):
    super().__init__(options)
    if kind not in MANIFESTS:
      raise ValueError(f"`kind` must be one of {sorted(MANIFESTS)}. Received: {kind!r}")
    options = self.options
    self.kind = kind
    self.manifest = ManifestOptions(
        image=image, name=name, namespace=namespace,
        # The option, else tf_keras: this machine's environment stays out of manifests.
        keras=task_keras.resolve(options.keras, {}, here=False),
        # Any value journals: in a pod the journal lives on the pod's own volume.
        data_journal=bool(options.data_work_dir), run_as_user=run_as_user,
        network_policy=network_policy, max_restarts=options.max_restarts,
        # Only what was given, and the watch, profile and trains-alone settings: a pod's
        # profile folder stays relative to its own working directory.
        env={**(options.env or {}), **options.task_variables(profile_dir_here=False)})

  def launch(self, command: Sequence[str], job: launcher_lib.Job) -> int:
    job, _ = launcher_lib.with_coordinator(job)
    docs = MANIFESTS[self.kind](job, command, self.manifest)
    if not self.manifest.network_policy:
      logging.getLogger("tfdist").warning(
          "No NetworkPolicy: any pod that reaches the job's pods on port %d and up%s can run "
          "code in them, as TensorFlow's servers have no authentication. Isolate the "
          "namespace yourself, or drop --network_policy=none.", PORT,
          f" or {DATA_PORT}" if job.data_workers else "")
    (self.options.output or sys.stdout).write(to_yaml(docs))
    return 0
