"""The `TF_CONFIG` environment: the cluster and task as TensorFlow's own tools write them.

Kubeflow's TFJob operator, `tfdist launch` and hand-written jobs all set
`TF_CONFIG`; it wins over every other environment.
"""

from typing import Mapping

from tfdist.cluster import environment
from tfdist.cluster import _spec as spec_lib

TF_CONFIG_ENV = "TF_CONFIG"


class TFConfigEnvironment(environment.ClusterEnvironment):
  """A task whose `TF_CONFIG` is set and non-empty."""

  name = "tf_config"

  def detect(self, environ: Mapping[str, str]) -> bool:
    return bool(environ.get(TF_CONFIG_ENV))

  def cluster_spec(self, environ: Mapping[str, str]) -> spec_lib.ClusterSpec:
    return spec_lib.ClusterSpec.from_tf_config(environ[TF_CONFIG_ENV])
