"""tfdist.cluster._jobset and .vertex: JobSet, TrainJob and Vertex AI pods find their task."""

import json

import pytest

from tfdist.cluster import ClusterSpec, TaskSpec, environment
from tfdist.cluster import _jobset as jobset
from tfdist.cluster import _vertex as vertex
from tfdist.launch import Job
from tfdist.launch.kubernetes import _jobset as jobset_manifests
from tfdist.launch.kubernetes import _manifests as kubernetes

SHAPE = "chief=1,worker=2,ps=1"


def _jobset_pod(replicated_job, index, shape=SHAPE, **extra):
  return {jobset.SHAPE_ENV: shape, jobset.JOBSET_NAME_ENV: "digits",
          jobset.REPLICATED_JOB_ENV: replicated_job, jobset.JOB_INDEX_ENV: "0",
          jobset.POD_INDEX_ENV: str(index), **extra}


def test_a_jobset_pod_is_the_task_of_its_replicated_job_and_index():
  spec = ClusterSpec.from_env(_jobset_pod("worker", 1))
  assert environment.detect(_jobset_pod("worker", 1)).name == "jobset"
  assert spec == ClusterSpec({
      "chief": ["digits-chief-0-0.digits:2222"],
      "worker": ["digits-worker-0-0.digits:2223", "digits-worker-0-1.digits:2224"],
      "ps": ["digits-ps-0-0.digits:2225"]}, task=TaskSpec("worker", 1))
  # A subdomain of its own, another first port, an evaluator beside the cluster.
  spec = ClusterSpec.from_env(_jobset_pod("evaluator", 0, "worker=1,evaluator=1",
                                          JOBSET_SUBDOMAIN="net", TFDIST_PORT="5000"))
  assert spec.jobs["worker"] == ("digits-worker-0-0.net:5000",)
  assert spec.task == TaskSpec("evaluator", 0) and spec.has_evaluator


def test_a_trainjob_pod_is_the_task_at_its_node_index():
  environ = _jobset_pod("node", 3)
  assert environment.detect(environ).name == "trainjob"
  spec = ClusterSpec.from_env(environ)
  assert spec.task == TaskSpec("ps", 0)
  assert spec.jobs["ps"] == ("digits-node-0-3.digits:2225",)
  assert spec.jobs["worker"][0] == "digits-node-0-1.digits:2223"


@pytest.mark.parametrize("environ, match", [
    (_jobset_pod("worker", 0, "worker=2,gpu=1"),
     r"`TFDIST_CLUSTER_SHAPE` must give each task type's count once.*Received: 'worker=2,gpu=1'$"),
    (_jobset_pod("worker", 0, "ps=1"), r"Received: 'ps=1'$"),
    (_jobset_pod("trainer", 0), r"`JOBSET_REPLICATED_JOB` \(label jobset.sigs.k8s.io/"
     r"replicatedjob-name\) must name one of the cluster's task types \['chief', 'ps', "
     r"'worker'\].*Received: 'trainer'$"),
    (_jobset_pod("worker", 2), r"`JOB_COMPLETION_INDEX` must be below the 2 worker task\(s\) "
     r"of `TFDIST_CLUSTER_SHAPE`. Received: 2$"),
    (_jobset_pod("worker", 0, JOBSET_JOB_INDEX="1"),
     r"`JOBSET_JOB_INDEX` must be 0: each replicated job is one Job.*Received: '1' in "
     r"replicated job 'worker'$"),
    (_jobset_pod("worker", "x"), r"`JOB_COMPLETION_INDEX` must be an integer >= 0.*"
     r"Received: 'x'$"),
    (_jobset_pod("node", 4), r"`JOB_COMPLETION_INDEX` must be below the TrainJob's 4 nodes.*"
     r"give the TrainJob numNodes=4. Received: 4$"),
])
def test_inconsistent_pods_are_one_line_errors(environ, match):
  with pytest.raises(ValueError, match=match):
    ClusterSpec.from_env(environ)


def test_every_pod_of_the_manifests_finds_its_own_task_and_the_same_cluster():
  for build in (jobset_manifests.jobset, jobset_manifests.trainjob):
    docs = build(Job(workers=2, ps=1, chief=True, evaluator=True), ["python", "t.py"],
                 kubernetes.ManifestOptions(name="digits", image="img:1"))
    pods = jobset_manifests.pods(docs)
    specs = [ClusterSpec.from_env(pod["env"]) for pod in pods]
    assert [str(s.task) for s in specs] == ["chief:0", "worker:0", "worker:1", "ps:0",
                                            "evaluator:0"]
    assert len({s.with_task("chief", 0) for s in specs}) == 1  # One cluster for all.
    hosts = [a.rsplit(":", 1)[0] for s in specs[:1] for t in s.jobs.values() for a in t]
    assert hosts == [pod["fqdn"] for pod in pods[:4]]


VERTEX = {"cluster": {"workerpool0": ["cmle-chief:2222"], "workerpool1": ["w0:2222", "w1:2222"],
                      "workerpool2": ["ps0:2222"], "workerpool3": ["eval:2222"]},
          "task": {"type": "workerpool1", "index": 1, "trial": ""}, "environment": "cloud"}


def test_vertex_cluster_spec_stands_in_for_an_absent_or_partial_tf_config():
  for tf_config in (None, json.dumps({"task": {"type": "worker", "index": 1}})):
    environ = {vertex.CLUSTER_SPEC_ENV: json.dumps(VERTEX),
               **({"TF_CONFIG": tf_config} if tf_config else {})}
    assert environment.detect(environ).name == "vertex"
    assert ClusterSpec.from_env(environ) == ClusterSpec(
        {"chief": ["cmle-chief:2222"], "worker": ["w0:2222", "w1:2222"], "ps": ["ps0:2222"]},
        task=TaskSpec("worker", 1))
  evaluator = dict(VERTEX, task={"type": "workerpool3", "index": 0})
  spec = ClusterSpec.from_env({vertex.CLUSTER_SPEC_ENV: json.dumps(evaluator)})
  assert spec.task == TaskSpec("evaluator", 0) and "evaluator" not in spec.jobs
  # A complete TF_CONFIG wins.
  complete = json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})
  environ = {vertex.CLUSTER_SPEC_ENV: json.dumps(VERTEX), "TF_CONFIG": complete}
  assert environment.detect(environ).name == "tf_config"


def test_a_broken_vertex_cluster_spec_is_a_one_line_error():
  broken = json.dumps(dict(VERTEX, task={"type": "workerpool7", "index": 0}))
  with pytest.raises(ValueError, match=r"`CLUSTER_SPEC` must be Vertex AI's JSON.*KeyError: "
                     r"'workerpool7'.*Received: '\{"):
    ClusterSpec.from_env({vertex.CLUSTER_SPEC_ENV: broken})
