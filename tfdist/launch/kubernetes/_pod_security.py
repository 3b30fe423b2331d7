"""A job's pods, closed and hardened: the restricted Pod Security profile and a NetworkPolicy.

TensorFlow's gRPC servers (every task, port 2222 and up) and the tf.data
service's (5050) listen on every interface with no authentication: whoever
reaches a port can run graph ops as the job's user (TensorFlow's
SECURITY.md: the distributed runtime "is not built for use in an untrusted
network"). Every manifest `tfdist launch --kubernetes=...` writes therefore
gets, from here:

- `JOB_LABEL` (`tfdist/job: <name>`) on every pod, trainers and tf.data
  servers alike;
- `network_policy(...)`: a NetworkPolicy that admits ingress to those pods
  only from pods of the same job, on the job's ports (as kubeflow/trainer#3120
  asks for every TrainJob). Egress stays open: tasks read data and write
  backups wherever the user put them;
- `harden(pod_spec, ...)`: the "restricted" Pod Security Standard for every
  container (`runAsNonRoot` and the runtime's default seccomp profile for the
  whole pod, init containers a controller adds included;
  `allowPrivilegeEscalation: false` and every capability dropped in each
  container), a read-only root file system with an emptyDir on `/tmp`
  (TensorFlow's and Python's scratch), and no service-account token (the
  tasks never call the API server).

An image with no non-root `USER` needs `run_as_user` (`--run_as_user`):
the kubelet refuses to start a container as root under `runAsNonRoot`.

Example:

    >>> pod = {"containers": [{"name": "tensorflow", "image": "me/train:1"}]}
    >>> harden(pod, run_as_user=10001)["securityContext"]["runAsUser"]
    10001
    >>> network_policy("mnist", "ml", [(2222, 2223)])["spec"]["podSelector"]
    {'matchLabels': {'tfdist/job': 'mnist'}}
"""

from typing import Dict, Optional, Sequence, Tuple

JOB_LABEL = "tfdist/job"
# Where TensorFlow, Python (tempfile) and Keras write when the root file system
# is read-only; a backup meant to survive the pod goes on a volume or bucket.
SCRATCH = "/tmp"
_SCRATCH_VOLUME = "tmp"


def job_labels(name: str) -> Dict[str, str]:
  """The label every pod of job `name` carries, and the NetworkPolicy selects."""
  return {JOB_LABEL: name}


def check_run_as_user(run_as_user: Optional[int]) -> None:
  """Raises ValueError unless `run_as_user` is None or a user id other than root's."""
  if run_as_user is not None and (isinstance(run_as_user, bool) or
                                  not isinstance(run_as_user, int) or run_as_user < 1):
    raise ValueError(
        "`run_as_user` must be a user id >= 1 (pods run as non-root), e.g. 10001, or None for "
        f"the image's own USER. Received: run_as_user={run_as_user!r}")


def pod_security_context(run_as_user: Optional[int] = None) -> dict:
  """The pod's part of the restricted profile (it holds for every container), and `runAsUser`."""
  context = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
  if run_as_user is not None:
    context["runAsUser"] = run_as_user
  return context


def container_security_context() -> dict:
  """What the restricted profile asks of each container, and a read-only root file system."""
  return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
          "privileged": False, "readOnlyRootFilesystem": True}


def harden(pod_spec: dict, *, run_as_user: Optional[int] = None) -> dict:
  """Applies the restricted profile to `pod_spec` and its containers, in place; returns it.

  Every container gets `container_security_context()` and the `/tmp` emptyDir;
  the pod gets `pod_security_context(run_as_user)` and no service-account token.

  Args:
    pod_spec: a Kubernetes PodSpec as a dict, with its `containers`.
    run_as_user: the user id to run as, for an image whose USER is root or
      unset; None keeps the image's.

  Returns:
    `pod_spec`.

  Raises:
    ValueError: `run_as_user` is not a user id >= 1.
  """
  check_run_as_user(run_as_user)
  pod_spec["automountServiceAccountToken"] = False
  pod_spec["securityContext"] = pod_security_context(run_as_user)
  for container in pod_spec["containers"]:
    container["securityContext"] = container_security_context()
    container.setdefault("volumeMounts", []).append(
        {"name": _SCRATCH_VOLUME, "mountPath": SCRATCH})
  pod_spec.setdefault("volumes", []).append({"name": _SCRATCH_VOLUME, "emptyDir": {}})
  return pod_spec


def network_policy(name: str, namespace: str,
                   ports: Sequence[Tuple[int, int]]) -> dict:
  """A NetworkPolicy: ingress to job `name`'s pods only from its own pods, on `ports`.

  Args:
    name: the job; its pods carry `job_labels(name)`.
    namespace: the job's namespace (a pod selector sees no further).
    ports: (first, last) TCP port ranges the job's servers listen on.

  Returns:
    The `networking.k8s.io/v1` NetworkPolicy, named after the job.
  """
  rules = []
  for first, last in ports:
    rules.append({"protocol": "TCP", "port": first, **({"endPort": last} if last > first else {})})
  return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
          "metadata": {"name": name, "namespace": namespace,
                       "labels": {"app.kubernetes.io/managed-by": "tfdist"}},
          "spec": {"podSelector": {"matchLabels": job_labels(name)},
                   "policyTypes": ["Ingress"],
                   "ingress": [{"from": [{"podSelector": {"matchLabels": job_labels(name)}}],
                                "ports": rules}]}}
