"""tfdist.cluster.environment: where a cluster comes from, in a fixed order."""

import json

import pytest

from tfdist import cluster
from tfdist.cluster import ClusterSpec, TaskSpec, environment
from tfdist.cluster import _kubernetes as kubernetes

WORKERS = {"worker": ["h0:2222", "h1:2222"]}
SLURM = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "n1",
         "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_JOB_ID": "7"}


def _template(jobs=None):
  config = json.dumps({"cluster": jobs or WORKERS, "task": {"type": "worker", "index": 0}})
  return config.replace('"index": 0}', f'"index": {kubernetes.INDEX_PLACEHOLDER}}}')


def test_environments_are_asked_in_order():
  assert cluster.available_environments() == ["vertex", "tf_config", "trainjob", "jobset",
                                               "kubernetes", "slurm"]


def test_tf_config_wins_over_kubernetes_and_slurm():
  tf_config = json.dumps({"cluster": WORKERS, "task": {"type": "worker", "index": 1}})
  environ = {"TF_CONFIG": tf_config, kubernetes.TEMPLATE_ENV: _template(),
             kubernetes.INDEX_ENV: "0", **SLURM}
  assert environment.detect(environ).name == "tf_config"
  assert ClusterSpec.from_env(environ).task == TaskSpec("worker", 1)


def test_a_kubernetes_pod_fills_in_its_index():
  environ = {kubernetes.TEMPLATE_ENV: _template(), kubernetes.INDEX_ENV: "1", **SLURM}
  spec = ClusterSpec.from_env(environ)
  assert environment.detect(environ).name == "kubernetes"
  assert spec == ClusterSpec(WORKERS, task=TaskSpec("worker", 1))


def test_slurm_when_nothing_else_applies():
  spec = ClusterSpec.from_env(SLURM)
  assert environment.detect(SLURM).name == "slurm"
  assert spec.task == TaskSpec("worker", 1)


def test_no_environment_is_a_single_process():
  assert environment.detect({}) is None
  assert ClusterSpec.from_env({}) is None
  # A one-task SLURM step is a single process too.
  assert ClusterSpec.from_env({**SLURM, "SLURM_STEP_NUM_TASKS": "1",
                               "SLURM_STEP_TASKS_PER_NODE": "1", "SLURM_PROCID": "0"}) is None


def test_an_explicit_cluster_wins_over_the_environment():
  explicit = ClusterSpec({"worker": ["localhost:1"]})
  assert environment.resolve(explicit, SLURM) is explicit
  assert environment.resolve(None, SLURM).jobs == {"worker": ("n1:20007", "n1:20008")}


@pytest.mark.parametrize("environ, match", [
    ({kubernetes.TEMPLATE_ENV: _template(), kubernetes.INDEX_ENV: "one"},
     r"`JOB_COMPLETION_INDEX` must be .*Received: 'one'"),
    ({kubernetes.TEMPLATE_ENV: "{not json", kubernetes.INDEX_ENV: "0"},
     r"`TF_CONFIG_TEMPLATE` is not a TF_CONFIG with __INDEX__.*Received: '\{not json'"),
    ({kubernetes.TEMPLATE_ENV: _template(), kubernetes.INDEX_ENV: "5"},
     r"`task.index` is out of range for job 'worker'.*Received: 5"),
])
def test_kubernetes_errors(environ, match):
  with pytest.raises(ValueError, match=match):
    ClusterSpec.from_env(environ)


def test_the_contract_needs_both_members():
  class Half(environment.ClusterEnvironment):
    def detect(self, environ):
      return False
  with pytest.raises(TypeError, match="abstract"):
    Half()
