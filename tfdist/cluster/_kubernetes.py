"""The Kubernetes Indexed Job environment: a pod's task from its completion index.

`tfdist launch --kubernetes=indexed` gives each pod the cluster as a TF_CONFIG
template whose task index is `__INDEX__`, and Kubernetes gives it
`JOB_COMPLETION_INDEX`. The pod's entry, `tfdist task`, asks this environment
for its cluster and hands the command the filled-in `TF_CONFIG`.
"""

import json
from typing import Mapping

from tfdist.cluster import environment
from tfdist.cluster import _spec as spec_lib

TEMPLATE_ENV = "TF_CONFIG_TEMPLATE"
INDEX_ENV = "JOB_COMPLETION_INDEX"
INDEX_PLACEHOLDER = "__INDEX__"


def fill_template(template: str, index: str) -> str:
  """The TF_CONFIG of the pod with completion index `index`."""
  return template.replace(INDEX_PLACEHOLDER, index)


class KubernetesEnvironment(environment.ClusterEnvironment):
  """A pod of an Indexed Job whose manifest tfdist wrote."""

  name = "kubernetes"

  def detect(self, environ: Mapping[str, str]) -> bool:
    return bool(environ.get(TEMPLATE_ENV)) and INDEX_ENV in environ

  def cluster_spec(self, environ: Mapping[str, str]) -> spec_lib.ClusterSpec:
    index = environ[INDEX_ENV]
    if not index.isdigit():
      raise ValueError(f"`{INDEX_ENV}` must be a pod's completion index, an integer >= 0. "
                       f"Received: {index!r}")
    try:
      json.loads(environ[TEMPLATE_ENV].replace(INDEX_PLACEHOLDER, "0"))
    except json.JSONDecodeError as e:
      raise ValueError(f"`{TEMPLATE_ENV}` is not a TF_CONFIG with {INDEX_PLACEHOLDER} for "
                       f"the index ({e}). Received: {environ[TEMPLATE_ENV]!r}") from None
    return spec_lib.ClusterSpec.from_tf_config(fill_template(environ[TEMPLATE_ENV], index))
