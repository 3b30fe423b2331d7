"""Vertex AI custom training: the cluster from `CLUSTER_SPEC`.

Vertex AI gives every replica `CLUSTER_SPEC`, a JSON object whose `cluster`
maps worker pools to "host:port" lists and whose `task` names this replica's
pool and index. For TensorFlow, worker pool 0 is the chief, 1 the workers, 2
the parameter servers and 3 the evaluator (Vertex AI's "Distributed training"
guide). Its prebuilt TensorFlow containers also set `TF_CONFIG`; custom
containers may not, or may set one without the cluster, so this environment
applies where `TF_CONFIG` is absent or partial, and is asked before it.
"""

import json
from typing import Mapping

from tfdist.cluster import environment
from tfdist.cluster import _spec as spec_lib

CLUSTER_SPEC_ENV = "CLUSTER_SPEC"
POOLS = {"workerpool0": spec_lib.CHIEF, "workerpool1": spec_lib.WORKER,
         "workerpool2": spec_lib.PS, "workerpool3": spec_lib.EVALUATOR}


def _complete(tf_config: str) -> bool:
  try:
    config = json.loads(tf_config)
  except json.JSONDecodeError:
    return True  # Not ours to judge: the TF_CONFIG environment names what is wrong.
  return not isinstance(config, dict) or ("cluster" in config and "task" in config)


class VertexEnvironment(environment.ClusterEnvironment):
  """A Vertex AI custom-training replica whose `TF_CONFIG` is absent or partial."""

  name = "vertex"

  def detect(self, environ: Mapping[str, str]) -> bool:
    return bool(environ.get(CLUSTER_SPEC_ENV)) and not _complete(environ.get("TF_CONFIG") or "{}")

  def cluster_spec(self, environ: Mapping[str, str]) -> spec_lib.ClusterSpec:
    text = environ[CLUSTER_SPEC_ENV]
    try:
      config = json.loads(text)
      pools, task = config["cluster"], config["task"]
      jobs = {POOLS[pool]: list(addresses) for pool, addresses in pools.items()
              if POOLS[pool] != spec_lib.EVALUATOR}
      task = spec_lib.TaskSpec(POOLS[task["type"]], int(task["index"]))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
      raise ValueError(
          f"`{CLUSTER_SPEC_ENV}` must be Vertex AI's JSON: 'cluster' mapping worker pools "
          f"{sorted(POOLS)} to 'host:port' lists, and 'task' with this replica's 'type' (a pool) "
          f"and 'index' ({type(e).__name__}: {e}). Received: {text!r}") from None
    return spec_lib.ClusterSpec(jobs, task=task)
