"""tfdist.cluster._slurm: SLURM's environment to a cluster, on CPU-only nodes."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tfdist.cluster import _slurm as slurm
from tfdist.cluster import ClusterSpec, TaskSpec


def step_env(procid, nodelist="node[1-2]", tasks_per_node="2(x2)", ntasks=4, **extra):
  env = {"SLURM_PROCID": str(procid), "SLURM_STEP_NUM_TASKS": str(ntasks),
         "SLURM_STEP_NODELIST": nodelist, "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
         "SLURM_JOB_ID": "1234"}
  env.update(extra)
  return env


def test_every_task_is_a_worker_on_cpu_only_nodes():
  spec = slurm.cluster_spec_from_slurm(step_env(3))
  base = 20000 + 1234
  assert spec.jobs == {"worker": (f"node1:{base}", f"node1:{base + 1}",
                                  f"node2:{base}", f"node2:{base + 1}")}
  assert spec.task == TaskSpec("worker", 3)


def test_ports_slurm_reserved_for_the_step_come_first():
  spec = slurm.cluster_spec_from_slurm(step_env(3, SLURM_STEP_RESV_PORTS="30001-30002"))
  assert spec.jobs == {"worker": ("node1:30001", "node1:30002", "node2:30001", "node2:30002")}
  listed = slurm.cluster_spec_from_slurm(step_env(0, SLURM_STEP_RESV_PORTS="30007,30010-30011"))
  assert listed.jobs["worker"][:2] == ("node1:30007", "node1:30010")
  # tfdist's explicit base wins over SLURM's reservation.
  explicit = slurm.cluster_spec_from_slurm(step_env(
      0, SLURM_STEP_RESV_PORTS="30001-30002", **{slurm.PORT_BASE_ENV: "40000"}))
  assert explicit.jobs["worker"][0] == "node1:40000"


def test_one_node_in_a_private_network_is_localhost():
  spec = slurm.cluster_spec_from_slurm(step_env(
      1, nodelist="node1", tasks_per_node="2", ntasks=2, **{slurm.LOOPBACK_ENV: "1"}))
  assert spec.jobs == {"worker": ("localhost:21234", "localhost:21235")}


def test_all_tasks_agree_on_the_cluster():
  specs = [slurm.cluster_spec_from_slurm(step_env(rank)) for rank in range(4)]
  assert all(s.jobs == specs[0].jobs for s in specs)
  assert [s.task.index for s in specs] == [0, 1, 2, 3]


def test_parameter_server_layout():
  env = step_env(1, **{slurm.NUM_PS_ENV: "1", slurm.PORT_BASE_ENV: "30000"})
  spec = slurm.cluster_spec_from_slurm(env)
  assert spec.jobs["chief"] == ("node1:30000",)
  assert spec.jobs["ps"] == ("node1:30001",)
  assert spec.jobs["worker"] == ("node2:30000", "node2:30001")
  assert spec.task == TaskSpec("ps", 0)
  assert slurm.cluster_spec_from_slurm(step_env(0, **{slurm.NUM_PS_ENV: "1"})).task == \
      TaskSpec("chief", 0)
  assert slurm.cluster_spec_from_slurm(step_env(3, **{slurm.NUM_PS_ENV: "1"})).task == \
      TaskSpec("worker", 1)


def test_from_env_prefers_tf_config_then_slurm():
  assert ClusterSpec.from_env(step_env(0)).task == TaskSpec("worker", 0)
  assert ClusterSpec.from_env(step_env(0, ntasks=1, nodelist="node1",
                                       tasks_per_node="1")) is None
  tf_config = ClusterSpec({"worker": ["h:1", "h:2"]}).tf_config("worker", 1)
  assert ClusterSpec.from_env({**step_env(0), "TF_CONFIG": tf_config}).task == \
      TaskSpec("worker", 1)


@pytest.mark.parametrize("env, error, match", [
    ({}, RuntimeError, r"Not inside a SLURM job step.*srun"),
    (step_env(0, ntasks=3), ValueError, r"step variables disagree.*SLURM_STEP_NUM_TASKS is 3"),
    (step_env(0, **{slurm.NUM_PS_ENV: "3"}), ValueError,
     r"needs a chief, 3 ps and at least one worker: 5 tasks.*--ntasks=5"),
    (step_env(0, **{slurm.PORT_BASE_ENV: "80"}), ValueError,
     r"`TFDIST_SLURM_PORT_BASE` must be a port from 1024 to 65000. Received: '80'"),
    (step_env(0, SLURM_STEP_RESV_PORTS="30001"), ValueError,
     r"SLURM reserved 1 port\(s\) for this step but a node runs 2 task\(s\): widen "
     r"MpiParams=ports.*Received: SLURM_STEP_RESV_PORTS='30001'"),
    (step_env(0, **{slurm.LOOPBACK_ENV: "1"}), ValueError,
     r"`TFDIST_SLURM_LOOPBACK=1` is for a step on one node .*Received: nodes \['node1', "),
    (step_env(0, SLURM_STEP_RESV_PORTS="a-b"), ValueError,
     r"`SLURM_STEP_RESV_PORTS` is not a list of ports.*Received: 'a-b'"),
])
def test_errors(env, error, match):
  with pytest.raises(error, match=match):
    slurm.cluster_spec_from_slurm(env)


def test_tensorflow_resolver_fails_on_cpu_only_nodes(monkeypatch):
  """Why this module exists: docs/known_issues.md, asserted so we notice when TF fixes it."""
  from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver as tf_slurm
  for name, value in step_env(0).items():
    monkeypatch.setenv(name, value)
  monkeypatch.setenv("SLURM_NTASKS", "4")
  with pytest.raises(ValueError, match="range\\(\\) arg 3 must not be zero"):
    tf_slurm.SlurmClusterResolver(gpus_per_node=0, gpus_per_task=0).cluster_spec()


def test_plain_node_names_are_read_without_tensorflow():
  # `tfdist task` wraps every task of tfdist's sbatch script: on one node, or nodes
  # listed plainly, its wrapper builds the cluster without importing TensorFlow.
  env = step_env(2, nodelist="node1,node2", tasks_per_node="2,1", ntasks=3)
  code = ("import json, sys; from tfdist.cluster import _slurm as slurm; "
          f"spec = slurm.cluster_spec_from_slurm({env!r}); "
          "print(json.dumps([spec.jobs['worker'], 'tensorflow' in sys.modules]))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
  assert out.returncode == 0, out.stderr
  assert json.loads(out.stdout) == [["node1:21234", "node1:21235", "node2:21234"], False]
  # As TensorFlow's parser reads the compressed form.
  assert slurm.cluster_spec_from_slurm(step_env(2, nodelist="node[1-2]", tasks_per_node="2,1",
                                                ntasks=3)).jobs["worker"] == \
      ("node1:21234", "node1:21235", "node2:21234")


# Enough for `scontrol show hostnames`, which talks to no controller.
MINIMAL_SLURM_CONF = "ClusterName=test\nSlurmctldHost=localhost\n"
COMPRESSED = [("n[1-2]", "1(x2)"), ("a[01-03,7],b5", "2(x3),1,1"), ("n[1-6]", "2(x3),1,1,1")]


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="needs SLURM's scontrol")
def test_compressed_lists_are_read_by_scontrol_without_tensorflow(tmp_path):
  # The wrapper of every task of a multi-node job reads `n[1-2]` and `1(x2)`: as
  # TensorFlow's parser does, without importing TensorFlow.
  from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver as tf_slurm
  conf = tmp_path / "slurm.conf"
  conf.write_text(MINIMAL_SLURM_CONF)
  code = ("import json, sys; from tfdist.cluster import _slurm as slurm; "
          "print(json.dumps([[[slurm.hostnames(nodes), slurm.tasks_per_node(tasks)] "
          f"for nodes, tasks in {COMPRESSED!r}], "
          "'tensorflow' in sys.modules]))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, SLURM_CONF=str(conf)))
  assert out.returncode == 0, out.stderr
  expanded, imported = json.loads(out.stdout)
  assert expanded == [[tf_slurm.expand_hostlist(nodes), tf_slurm.expand_tasks_per_node(tasks)]
                      for nodes, tasks in COMPRESSED]
  assert not imported


def test_without_scontrol_tensorflow_reads_the_host_list(monkeypatch, tmp_path):
  from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver as tf_slurm
  monkeypatch.setenv("PATH", str(tmp_path))  # No scontrol here.
  for nodes, tasks in COMPRESSED:
    assert slurm.hostnames(nodes) == tf_slurm.expand_hostlist(nodes)
    assert slurm.tasks_per_node(tasks) == tf_slurm.expand_tasks_per_node(tasks)
  with pytest.raises(ValueError, match=r"`SLURM_STEP_TASKS_PER_NODE` must be counts like "
                     r"'2\(x3\),1'. Received: '2\(3\)'"):
    slurm.tasks_per_node("2(3)")
