"""In-process TensorFlow servers: a whole cluster inside one Python process.

This is how a parameter-server job runs on one machine without launching
processes, for tests, notebooks and `tfdist compare`.
"""

import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import List

import tensorflow as tf

from tfdist import cluster as cluster_lib
from tfdist.cluster import preflight

logger = logging.getLogger("tfdist")


def server_config(num_workers: int) -> "tf.compat.v1.ConfigProto":
  """The session config every in-process server needs.

  Measured on 2 cores (docs/known_issues.md): with TF's default inter-op pool, a chief + N
  workers + ps in one process deadlock, because each worker's ops block
  waiting on inter-op threads that the other servers hold. N + 1 threads suffice.
  """
  config = tf.compat.v1.ConfigProto()
  config.inter_op_parallelism_threads = num_workers + 1
  return config


def network_interfaces() -> List[str]:
  """The network interfaces this process sees besides loopback."""
  return sorted(name for _, name in socket.if_nameindex() if name != "lo")


def network_is_private() -> bool:
  """Whether this process's network has only loopback (a private namespace)."""
  return not network_interfaces()


def start_servers(spec: cluster_lib.ClusterSpec,
                  task_types=(cluster_lib.WORKER, cluster_lib.PS)) -> List["tf.distribute.Server"]:
  """Starts a `tf.distribute.Server` for every task of `task_types` in `spec`.

  The servers live as long as the process; keep the returned list referenced.

  Args:
    spec: the cluster; its addresses must be free on this machine.
    task_types: which jobs to serve here.

  Returns:
    The started servers, in `spec.tasks()` order.

  Raises:
    RuntimeError: a port is already taken.
  """
  config = server_config(len(spec.jobs.get(cluster_lib.WORKER, ())))
  servers = []
  for task in spec.tasks():
    if task.type not in task_types:
      continue
    try:
      servers.append(tf.distribute.Server(
          spec.to_tf(), job_name=task.type, task_index=task.index,
          protocol="grpc", config=config, start=True))
    except (tf.errors.UnknownError, tf.errors.InternalError) as e:
      raise RuntimeError(
          f"Could not start the in-process server for {task} at "
          f"{spec.address(task)}: the port is probably taken. Build the spec with "
          f"`ClusterSpec.local(...)` for fresh ports. Received: {e.message}") from e
  return servers


# Seconds the chief must stay unreachable, after it was seen, before a serving
# task takes it as finished: long enough to ride out a slow accept, short enough
# that a SLURM step or a Kubernetes Job ends within seconds of the chief.
CHIEF_GONE_SECONDS = 5.0
_POLL_SECONDS = 1.0


def serve(resolver) -> None:
  """Runs this process as the worker or ps task `resolver` names, until the chief is done.

  In parameter-server training only the coordinator (chief) runs the training
  program; every worker and ps task just serves. TensorFlow's servers never
  stop by themselves, so a SLURM step or a Kubernetes Job of them would run
  until its time limit after training ended. So, when the cluster has a chief,
  this task watches the chief's port: once the chief has answered and then
  stays unreachable for `CHIEF_GONE_SECONDS`, the task exits with 0 (143 if it
  got SIGTERM meanwhile: it serves on so that the chief can back up). (The
  chief's own exit code says whether training succeeded; under SLURM a chief
  that fails ends the step through `srun --kill-on-bad-exit`.) Never returns.
  """
  # Fail fast on a lost peer so the coordinator can reschedule (TF's PS guide).
  os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
  server = tf.distribute.Server(
      resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
      protocol=resolver.rpc_layer or "grpc", start=True)
  task = f"{resolver.task_type}:{resolver.task_id}"
  logger.info("tfdist: serving as %s at %s", task, server.target)
  chief = resolver.cluster_spec().as_dict().get(cluster_lib.CHIEF)
  if not chief:
    server.join()  # No chief to watch: serve until stopped.
  # A scheduler stopping the job sends SIGTERM to every task at once; the
  # chief's backup then reads the variables from the ps tasks and runs steps on
  # the workers, so they serve on until the chief has gone (SIGKILL ends them
  # at the end of the grace period whatever happens).
  terminated = []
  if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, lambda signum, frame: terminated.append(signum))
  wait_for_chief_to_finish(chief[0], stopping=lambda: bool(terminated))
  logger.info("tfdist: the chief at %s has finished; %s stops serving", chief[0], task)
  sys.stdout.flush()
  # TF's server threads never end; exit without waiting for them.
  os._exit(128 + signal.SIGTERM if terminated else 0)


def wait_for_chief_to_finish(address: str, stopping=lambda: False) -> None:
  """Returns once `address` answered and then stayed unreachable for CHIEF_GONE_SECONDS.

  Once `stopping()` (the task got SIGTERM: its job is being stopped), a chief
  whose port refuses connections is gone at once: a TensorFlow server listens
  until its process exits, and a launcher stops the serving tasks of a job
  whose chief has ended (5 s less per job). A chief that does not answer in
  time may only be busy, and gets the whole CHIEF_GONE_SECONDS.
  """
  seen, gone_since = False, None
  while True:
    if preflight.reachable(address, timeout=_POLL_SECONDS):
      seen, gone_since = True, None
    elif seen:
      now = time.monotonic()
      gone_since = gone_since or now
      if now - gone_since >= CHIEF_GONE_SECONDS or (stopping() and _refused(address)):
        return
    time.sleep(_POLL_SECONDS / 4 if stopping() else _POLL_SECONDS)


def _refused(address: str) -> bool:
  """Whether every address of `address`'s host refuses a connection: nothing listens there."""
  addresses = preflight.resolve(address)
  for family, sockaddr in addresses:
    with socket.socket(family, socket.SOCK_STREAM) as sock:
      sock.settimeout(_POLL_SECONDS)
      try:
        sock.connect(sockaddr)
      except ConnectionRefusedError:
        continue
      except OSError:  # No answer in time, no route: not known to be gone.
        return False
      return False  # Something answers after all.
  return bool(addresses)
