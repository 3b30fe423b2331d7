"""In-process TensorFlow servers: a whole cluster inside one Python process.

This is how a parameter-server job runs on one machine without launching
processes, for tests, notebooks and `tfdist compare`.
"""

import os
from typing import List

import tensorflow as tf

from tfdist import cluster as cluster_lib


def server_config(num_workers: int) -> "tf.compat.v1.ConfigProto":
  """The session config every in-process server needs.

  Measured on 2 cores (docs/known_issues.md): with TF's default inter-op pool, a chief + N
  workers + ps in one process deadlock, because each worker's ops block
  waiting on inter-op threads that the other servers hold. N + 1 threads suffice.
  """
  config = tf.compat.v1.ConfigProto()
  config.inter_op_parallelism_threads = num_workers + 1
  return config


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


def serve(resolver) -> None:
  """Runs this process as the worker or ps task `resolver` names, until killed.

  In parameter-server training only the coordinator (chief) runs the training
  program; every worker and ps task just serves. Never returns.
  """
  # Fail fast on a lost peer so the coordinator can reschedule (TF's PS guide).
  os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
  server = tf.distribute.Server(
      resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
      protocol=resolver.rpc_layer or "grpc", start=True)
  print(f"tfdist: serving as {resolver.task_type}:{resolver.task_id} at "
        f"{server.target}", flush=True)
  server.join()
