"""parameter_server: asynchronous training; workers run steps, ps tasks hold the variables.

On a worker or ps task the builder serves and never returns, so one script
runs as every task; on the chief (the coordinator) it waits for every worker
and ps to answer, then builds TF's ParameterServerStrategy.
"""

import logging
from typing import Optional

import tensorflow as tf

from tfdist import _keras_support as keras_support
from tfdist._choices import Name
from tfdist.strategies import _servers as servers_lib
from tfdist.cluster import preflight as preflight_lib
from tfdist import cluster as cluster_lib
from tfdist.strategies import _keras_guard as keras_guard
from tfdist.strategies import _registry as registry

logger = logging.getLogger("tfdist")

NETWORKS = ("loopback", "host")


def check_cluster(spec: cluster_lib.ClusterSpec) -> None:
  """parameter_server needs ps and worker jobs, and a chief when this process is a task.

  A task of the cluster (as TF_CONFIG makes every process) needs a chief to
  coordinate: without one, every worker and ps serves forever and nothing
  trains. A coordinator outside the cluster (a spec with no task) needs none.
  """
  for job in (cluster_lib.PS, cluster_lib.WORKER):
    if job not in spec.jobs:
      raise ValueError(
          f"parameter_server needs a `cluster.{job}` job with at least one task, "
          f"e.g. ClusterSpec.local(workers=2, ps=1, chief=True). Received: {spec!r}")
  if spec.task is not None and cluster_lib.CHIEF not in spec.jobs:
    raise ValueError(
        "parameter_server needs a `cluster.chief` task: the chief is the coordinator "
        "that runs the training program, and without one every worker and ps task "
        "serves forever. Add a chief to the cluster (e.g. \"chief\": [\"host:port\"] in "
        "TF_CONFIG) and run the same script there, or launch it with `tfdist launch "
        "--workers 2 --ps 1 -- python train.py`, which adds one. Received: jobs "
        f"{sorted(spec.jobs)} and no chief, on task {spec.task}")


class ParameterServerStrategy(keras_guard.RefusesKeras3, keras_guard.RefusesJitCompile,
                              tf.distribute.ParameterServerStrategy):
  """`tf.distribute.ParameterServerStrategy` that refuses Keras 3 `fit` and XLA steps.

  It owns its coordinator.
  """

  _tfdist_name = Name.PARAMETER_SERVER

  def _jit_failure(self):
    return keras_guard.XLA_PS_VARIABLES

  def _keras3_failure(self):
    return keras_support.PSS_FAILURE

  @property
  def coordinator(self) -> "tf.distribute.experimental.coordinator.ClusterCoordinator":
    """The strategy's `ClusterCoordinator`; TF keeps one per strategy, and Keras reuses it."""
    return tf.distribute.experimental.coordinator.ClusterCoordinator(self)


def parameter_server(cluster: registry.ClusterArg = None,
                      num_ps_shards: Optional[int] = None,
                      min_shard_bytes: Optional[int] = None,
                      in_process: bool = False,
                      network: str = "loopback",
                      preflight_timeout: Optional[float] = None) -> tf.distribute.Strategy:
  """Asynchronous training: workers run steps, ps tasks hold the variables.

  Args:
    cluster: a `ClusterSpec` or resolver; default `TF_CONFIG`. With `in_process`
      and no cluster, a local chief + 2 workers + 1 ps.
    num_ps_shards: split every variable into this many shards across the ps tasks.
    min_shard_bytes: split variables into shards of at least this many bytes
      (at most one shard per ps task). Exclusive with `num_ps_shards`.
    in_process: start every worker and ps of `cluster` as servers inside this
      process, and coordinate from here. For one machine, tests and notebooks.
    network: with `in_process`, where its servers may listen. TensorFlow's
      servers listen on every interface and take unauthenticated requests, so
      "loopback" (the default) refuses to start them unless this process's
      network has only loopback (as under `tfdist train --in_process` or
      `tfdist launch`); "host" accepts this machine's network, with a warning.
    preflight_timeout: seconds the coordinator waits for every worker and ps to
      answer before it connects (default 30, or TFDIST_PREFLIGHT_TIMEOUT).

  On a worker or ps task (per TF_CONFIG or `cluster`) this call starts the
  task's server and never returns: in parameter-server training only the chief
  runs the program, so one script serves every task unchanged.
  """
  if num_ps_shards is not None and min_shard_bytes is not None:
    raise ValueError(
        "Pass at most one of `num_ps_shards` and `min_shard_bytes`. "
        f"Received: num_ps_shards={num_ps_shards!r}, min_shard_bytes={min_shard_bytes!r}")
  for field, value in (("num_ps_shards", num_ps_shards), ("min_shard_bytes", min_shard_bytes)):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
      raise ValueError(f"`{field}` must be an integer >= 1. Received: {value!r}")
  servers = []
  if in_process:
    if cluster is None:
      cluster = cluster_lib.ClusterSpec.local(workers=2, ps=1, chief=True)
    if not isinstance(cluster, cluster_lib.ClusterSpec):
      raise TypeError(
          "`in_process=True` needs a tfdist.ClusterSpec (or none) to start servers "
          f"from. Received: cluster={cluster!r}")
    check_cluster(cluster)
    if network not in NETWORKS:
      raise ValueError(f"`network` must be one of {list(NETWORKS)}. Received: {network!r}")
    ports = sorted(int(a.rsplit(":", 1)[1]) for jobs in cluster.jobs.values() for a in jobs)
    interfaces = servers_lib.network_interfaces()
    if interfaces:
      # TensorFlow binds 0.0.0.0 whatever the spec says (tensorflow/tensorflow#2925),
      # and these servers live in this very process: no namespace can be put around them.
      if network == "loopback":
        raise ValueError(
            "An in-process cluster's TensorFlow servers would listen on every interface of "
            "this machine (TensorFlow binds 0.0.0.0) and take unauthenticated requests from "
            "any host that reaches their ports. Run it where only loopback exists "
            "(`tfdist train --in_process`, or a cluster under `tfdist launch`), or pass "
            "network='host' to accept this machine's network. Received: network='loopback' "
            f"on a network with {interfaces}")
      logger.warning(
          "The in-process cluster's TensorFlow servers listen on every interface of this "
          "machine (network='host'), on ports %s; firewall them on a shared network.", ports)
    servers = servers_lib.start_servers(cluster)
    if cluster_lib.CHIEF in cluster.jobs:
      cluster = cluster.with_task(cluster_lib.CHIEF, 0)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        cluster.to_tf(), task_type=cluster.task.type if cluster.task else None,
        task_id=cluster.task.index if cluster.task else None, rpc_layer="grpc")
  else:
    resolver = registry.cluster_resolver(Name.PARAMETER_SERVER, cluster)
    if resolver is None:
      raise ValueError(
          "parameter_server needs a cluster with ps and worker tasks: set "
          "TF_CONFIG, pass cluster=tfdist.ClusterSpec(...), or pass "
          "in_process=True for a local one. Received: cluster=None and no TF_CONFIG")
    spec = registry.spec_of(resolver)
    if spec is not None:  # A resolver passed in has not been checked yet.
      check_cluster(spec)
    if resolver.task_type in (cluster_lib.WORKER, cluster_lib.PS):
      servers_lib.serve(resolver)  # Never returns: these tasks only serve.
    if spec is not None:  # The coordinator: every worker and ps must be up.
      preflight_lib.wait_for_tasks(
          spec, timeout=preflight_timeout,
          tasks=[t for t in spec.tasks() if t.type in (cluster_lib.WORKER, cluster_lib.PS)])
  num_ps = len(resolver.cluster_spec().as_dict().get(cluster_lib.PS, ()))
  partitioner = None
  if num_ps_shards is not None:
    partitioner = tf.distribute.experimental.partitioners.FixedShardsPartitioner(num_ps_shards)
  elif min_shard_bytes is not None:
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=min_shard_bytes, max_shards=num_ps)
  strategy = ParameterServerStrategy(resolver, variable_partitioner=partitioner)
  # In-process servers stop when garbage-collected; tie them to the strategy.
  strategy._tfdist_servers = servers
  return strategy
