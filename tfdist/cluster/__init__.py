"""Clusters: validated specs, the environments they come from, and preflight.

- `spec`: `ClusterSpec`, `TaskSpec`, addresses and the per-task `TF_CONFIG`;
- `environment`: the `ClusterEnvironment` contract and its resolution order;
  `tf_config`, `kubernetes` and `slurm` implement it, in that order;
- `preflight`: every task reachable, or a clear error in bounded time;
- `data_service`: where a tf.data service beside the cluster listens;
- `grace`: a task's seconds between SIGTERM and SIGKILL, as the launcher tells it.

Nothing here imports TensorFlow, so launchers and `tfdist doctor` stay light.

Example:

    >>> from tfdist.cluster import ClusterSpec
    >>> spec = ClusterSpec.from_env()    # TF_CONFIG, a Kubernetes pod, SLURM, or None
"""

from tfdist.cluster.spec import (CHIEF, CLUSTER_TASK_TYPES, EVALUATOR, LOOPBACK_HOSTS, PS,
                                 TASK_TYPES, TF_CONFIG_KEYS, WORKER, ClusterSpec, TaskSpec,
                                 check_task_count, count_workers, pick_unused_ports, split_address)
from tfdist.cluster import environment
from tfdist.cluster import kubernetes
from tfdist.cluster import slurm
from tfdist.cluster import tf_config
from tfdist.cluster.environment import ClusterEnvironment, available_environments, detect

# In this order: TF_CONFIG wins, then a Kubernetes pod, then SLURM.
environment.register(tf_config.TFConfigEnvironment())
environment.register(kubernetes.KubernetesEnvironment())
environment.register(slurm.SLURMEnvironment())

__all__ = ["CHIEF", "CLUSTER_TASK_TYPES", "ClusterEnvironment", "ClusterSpec", "EVALUATOR",
           "LOOPBACK_HOSTS", "PS", "TASK_TYPES", "TF_CONFIG_KEYS", "TaskSpec", "WORKER",
           "available_environments", "check_task_count", "count_workers", "detect", "pick_unused_ports",
           "split_address"]
