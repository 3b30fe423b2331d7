"""Clusters: validated specs, the environments they come from, and preflight.

- `spec`: `ClusterSpec`, `TaskSpec`, addresses and the per-task `TF_CONFIG`;
- `environment`: the `ClusterEnvironment` contract; `vertex`, `tf_config`,
  `jobset` (TrainJob and JobSet pods), `kubernetes` (Indexed Jobs) and `slurm`
  implement it, registered below in the one order `detect` asks them
  (`available_environments()`);
- `preflight`: every task reachable, or a clear error in bounded time;
- `data_service`: where a tf.data service beside the cluster listens;
- `grace`: a task's seconds between SIGTERM and SIGKILL, as the launcher tells it;
- `elastic`: the workers a job asked for, when its launcher runs fewer.

Importing this package imports no TensorFlow, so launchers and `tfdist doctor`
stay light; only a SLURM step's host list is expanded by TF's own parser, on use.

Example:

    >>> from tfdist.cluster import ClusterSpec
    >>> spec = ClusterSpec.from_env()    # TF_CONFIG, a Kubernetes pod, SLURM, or None
"""

from tfdist.cluster._spec import (CHIEF, EVALUATOR, PS, WORKER, ClusterSpec, TaskSpec,
                                 pick_unused_ports)
from tfdist.cluster import environment
from tfdist.cluster import _jobset
from tfdist.cluster import _kubernetes
from tfdist.cluster import preflight
from tfdist.cluster import _slurm
from tfdist.cluster import _tf_config
from tfdist.cluster import _vertex
from tfdist.cluster.environment import ClusterEnvironment, available_environments, detect

# In this order: a complete TF_CONFIG wins (Vertex AI's CLUSTER_SPEC stands in
# for one that is absent or partial), then a Kubernetes pod, then SLURM.
environment.register(_vertex.VertexEnvironment())
environment.register(_tf_config.TFConfigEnvironment())
environment.register(_jobset.TrainJobEnvironment())
environment.register(_jobset.JobSetEnvironment())
environment.register(_kubernetes.KubernetesEnvironment())
environment.register(_slurm.SLURMEnvironment())

__all__ = ["CHIEF", "ClusterEnvironment", "ClusterSpec", "EVALUATOR", "PS", "TaskSpec", "WORKER",
           "available_environments", "detect", "environment", "pick_unused_ports", "preflight"]
