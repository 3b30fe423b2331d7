"""tfdist.cluster: building, converting and validating cluster specs."""

import json
import socket

import hypothesis
import pytest
import tensorflow as tf
from hypothesis import strategies as st

from tfdist import cluster as cluster_lib
from tfdist.cluster import ClusterSpec, TaskSpec, pick_unused_ports
from tfdist.cluster import _spec as spec_lib

TWO_WORKERS = {"worker": ["localhost:2222", "localhost:2223"]}


def tf_config(cluster, task=None, **extra):
  config = {"cluster": cluster, **extra}
  if task is not None:
    config["task"] = task
  return json.dumps(config)


class TestBuild:

  def test_from_dict_orders_jobs_and_keeps_addresses(self):
    spec = ClusterSpec.from_dict({"ps": ["h:3"], "worker": ["h:2"], "chief": ["h:1"]})
    assert list(spec.jobs) == ["chief", "worker", "ps"]
    assert spec.jobs["worker"] == ("h:2",)
    assert spec.num_workers == 2 and spec.num_ps == 1

  def test_from_tf_config_reads_task(self):
    spec = ClusterSpec.from_tf_config(tf_config(TWO_WORKERS, {"type": "worker", "index": 1}))
    assert spec.task == TaskSpec("worker", 1)

  def test_from_env(self, monkeypatch):
    assert ClusterSpec.from_env({}) is None
    monkeypatch.setenv("TF_CONFIG", tf_config(TWO_WORKERS, {"type": "worker", "index": 0}))
    assert ClusterSpec.from_env().task == TaskSpec("worker", 0)

  def test_local_gives_distinct_free_loopback_ports(self):
    spec = ClusterSpec.local(workers=3, ps=2, chief=True, evaluator=True)
    addresses = [a for job in spec.jobs.values() for a in job]
    assert len(addresses) == 6 == len(set(addresses))
    for address in addresses:
      host, port = address.rsplit(":", 1)
      assert host == "localhost"
      with socket.socket() as s:  # Free right now.
        s.bind(("127.0.0.1", int(port)))
    assert [str(t) for t in spec.tasks()] == [
        "chief:0", "worker:0", "worker:1", "worker:2", "ps:0", "ps:1", "evaluator:0"]

  def test_tf_config_round_trips_for_every_task(self):
    spec = ClusterSpec.local(workers=2, ps=1, chief=True, evaluator=True)
    for task in spec.tasks():
      parsed = ClusterSpec.from_tf_config(spec.tf_config(task.type, task.index))
      assert parsed.jobs == spec.jobs
      assert parsed.task == task
      assert "evaluator" not in json.loads(spec.tf_config(task.type, task.index))["cluster"]

  def test_converts_to_tensorflow(self):
    spec = ClusterSpec.from_dict(TWO_WORKERS, task={"type": "worker", "index": 1})
    assert spec.to_tf().as_dict() == tf.train.ClusterSpec(TWO_WORKERS).as_dict()
    resolver = spec.cluster_resolver()
    assert (resolver.task_type, resolver.task_id, resolver.rpc_layer) == ("worker", 1, "grpc")
    assert resolver.cluster_spec().as_dict() == TWO_WORKERS

  def test_resolver_needs_a_task(self):
    with pytest.raises(ValueError, match=r"does not say which task.*Received: task=None"):
      ClusterSpec(TWO_WORKERS).cluster_resolver()

  def test_a_tf_config_without_a_task_is_a_value_error(self):
    spec = ClusterSpec.from_tf_config(json.dumps({"cluster": TWO_WORKERS}))
    with pytest.raises(ValueError, match=r"add TF_CONFIG's 'task'.*Received: task=None"):
      spec.cluster_resolver()

  def test_repr_is_informative(self):
    spec = ClusterSpec(TWO_WORKERS).with_task("worker", 1)
    assert repr(spec) == ("ClusterSpec(worker=['localhost:2222', 'localhost:2223'], "
                          "task='worker:1')")

  def test_ipv6_addresses(self):
    spec = ClusterSpec({"worker": ["[::1]:2222", "[::1]:2223"]})
    assert spec.num_workers == 2

  @pytest.mark.parametrize("host", ["node-1", "node-1.example.com", "10.0.0.2", "[fe80::1]",
                                    "tfdist-worker-0.tfdist.default.svc", "compose_worker_1",
                                    "a" * 63, "N01"])
  def test_valid_hosts(self, host):
    assert ClusterSpec({"worker": [f"{host}:2222"]}).num_workers == 1


class TestValidation:
  """Every bad spec is one clear error: field, fix, and what was received."""

  @pytest.mark.parametrize("text, error, match", [
      ("{not json", ValueError, r"`TF_CONFIG` is not valid JSON.*Received: '\{not json'"),
      ("[1, 2]", TypeError, r"must be a JSON object.*Received: '\[1, 2\]'"),
      ('{"task": {}}', ValueError, r"has no 'cluster'"),
      ('{"cluster": {"worker": ["h:1"]}, "tsk": 1}', ValueError, r"unknown key\(s\) \['tsk'\]"),
      ('{"cluster": {"worker": ["h:1"]}, "rpc_layer": "mpi"}', ValueError,
       r"rpc_layer` must be 'grpc'.*Received: 'mpi'"),
      ('{"cluster": "worker"}', TypeError, r"`cluster` must be an object.*Received: 'worker'"),
  ])
  def test_bad_tf_config(self, text, error, match):
    with pytest.raises(error, match=match):
      ClusterSpec.from_tf_config(text)

  @pytest.mark.parametrize("cluster, error, match", [
      ({}, ValueError, r"`cluster` is empty"),
      ({"master": ["h:1"]}, ValueError,
       r"`cluster.master` is not a task type. Valid task types: \['chief', 'worker', 'ps', "
       r"'evaluator'\].*Received: 'master'"),
      ({"worker": []}, ValueError, r"`cluster.worker` is empty.*Received: cluster.worker=\[\]"),
      ({"worker": "h:1"}, TypeError, r"`cluster.worker` must be a list.*Received: 'h:1'"),
      ({"worker": ["localhost"]}, ValueError,
       r"`cluster.worker\[0\]` is not host:port. Add a port, e.g. 'localhost:2222'. "
       r"Received: 'localhost'"),
      ({"worker": ["h:1", "h:http"]}, ValueError,
       r"`cluster.worker\[1\]` has a bad port 'http'.*Received: 'h:http'"),
      ({"worker": ["h:70000"]}, ValueError, r"bad port '70000'.*1 to 65535"),
      ({"worker": ["h:0"]}, ValueError, r"bad port '0'"),
      ({"worker": [":2222"]}, ValueError, r"`cluster.worker\[0\]` has no host"),
      ({"worker": [2222]}, TypeError, r"`cluster.worker\[0\]` must be a 'host:port' string"),
      ({"worker": ["h:1"], "ps": ["h:1"]}, ValueError,
       r"`cluster.ps\[0\]` has the same address as `cluster.worker\[0\]`.*Received: 'h:1'"),
      ({"chief": ["h:1", "h:2"]}, ValueError,
       r"`cluster.chief` must have exactly one task.*Received: cluster.chief=\['h:1', 'h:2'\]"),
      ({"worker": ["h:1"], "evaluator": ["h:2"]}, ValueError,
       r"`cluster.evaluator` must not be listed in the cluster.*Received: "
       r"cluster.evaluator=\['h:2'\]"),
  ])
  def test_bad_cluster(self, cluster, error, match):
    with pytest.raises(error, match=match):
      ClusterSpec.from_dict(cluster)

  # Before: any host was accepted, and a bad one failed only after the 30 s
  # preflight, naming another task.
  @pytest.mark.parametrize("workers, match", [
      (["node 1:2222"], r"`cluster.worker\[0\]` has a host that is not a valid host name or "
                        r"IP address: it holds \[' '\].*Received: 'node 1:2222'"),
      (["h:1", "no\tde:2222"], r"`cluster.worker\[1\]` has a host.*it holds \['\\t'\]"),
      (["nodé:2222"], r"it holds \['é'\]"),
      (["-node:2222"], r"starts or ends with '-'.*Received: '-node:2222'"),
      (["a..b:2222"], r"the part '' is empty"),
      (["999.1.1.1:2222"], r"'999.1.1.1' is not an IPv4 address"),
      (["[::g]:2222"], r"'::g' in brackets is not an IPv6 address"),
  ])
  def test_bad_hosts_fail_at_once(self, workers, match):
    with pytest.raises(ValueError, match=match):
      ClusterSpec.from_dict({"worker": workers})

  @pytest.mark.parametrize("task, error, match", [
      ({"index": 0}, ValueError, r"`task.type` is missing"),
      ({"type": "worker"}, ValueError, r"`task.index` is missing"),
      ({"type": "master", "index": 0}, ValueError, r"`task.type` is not a task type"),
      ({"type": "worker", "index": "0"}, ValueError,
       r"`task.index` must be an integer, e.g. 0. Received: '0'"),
      ({"type": "worker", "index": True}, ValueError, r"`task.index` must be an integer"),
      ({"type": "worker", "index": 2}, ValueError,
       r"`task.index` is out of range for job 'worker', which has 2 task\(s\): use 0 to 1. "
       r"Received: 2"),
      ({"type": "worker", "index": -1}, ValueError, r"out of range.*Received: -1"),
      ({"type": "ps", "index": 0}, ValueError, r"the cluster has no 'ps' job"),
      ({"type": "evaluator", "index": 1}, ValueError, r"evaluator must be 0"),
      ("worker", TypeError, r"`task` must be an object"),
  ])
  def test_bad_task(self, task, error, match):
    with pytest.raises(error, match=match):
      ClusterSpec.from_dict(TWO_WORKERS, task=task)

  def test_evaluator_task_is_outside_the_cluster(self):
    spec = ClusterSpec.from_dict(TWO_WORKERS, task={"type": "evaluator", "index": 0})
    assert spec.has_evaluator and "evaluator" not in spec.jobs

  def test_tf_config_for_a_missing_task(self):
    with pytest.raises(ValueError, match=r"out of range.*Received: 5"):
      ClusterSpec(TWO_WORKERS).tf_config("worker", 5)
    with pytest.raises(ValueError, match=r"no evaluator.*Received: task_type='evaluator'"):
      ClusterSpec(TWO_WORKERS).tf_config("evaluator", 0)

  def test_mixing_localhost_with_other_hosts_warns(self):
    with pytest.warns(UserWarning, match=r"mixes loopback hosts \['localhost'\] with other "
                      r"hosts \['node2'\]"):
      ClusterSpec({"worker": ["localhost:2222", "node2:2222"]})

  @pytest.mark.parametrize("kwargs, match", [
      ({"workers": 0}, r"`workers` must be an integer >= 1. Received: workers=0"),
      ({"workers": 1, "ps": -1}, r"`ps` must be an integer >= 0"),
      ({"workers": 1, "host": "0.0.0.0"}, r"must be a loopback name.*Received: host='0.0.0.0'"),
  ])
  def test_bad_local(self, kwargs, match):
    with pytest.raises(ValueError, match=match):
      ClusterSpec.local(**kwargs)


# Hostile input: whatever arrives in TF_CONFIG, the only errors are tfdist's own.
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 70000) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["cluster", "task", "worker", "chief", "ps", "evaluator", "type",
                         "index", "rpc_layer", "x"]) | st.text(max_size=6), children,
        max_size=4), max_leaves=12)


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(_json)
def test_random_tf_config_raises_only_documented_errors(config):
  try:
    ClusterSpec.from_tf_config(json.dumps(config))
  except (ValueError, TypeError) as e:
    assert "Received:" in str(e)


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(st.text(max_size=40))
def test_random_text_raises_only_documented_errors(text):
  try:
    ClusterSpec.from_tf_config(text)
  except (ValueError, TypeError) as e:
    assert "Received:" in str(e)


def test_pick_unused_ports_are_distinct():
  ports = cluster_lib.pick_unused_ports(20)
  assert len(set(ports)) == 20


def test_ports_are_picked_below_the_range_outgoing_connections_take(monkeypatch):
  # Before: the kernel's own free ports, which any connection opened before the
  # task binds its port could take (seen with 128 tasks beside another test run).
  low = spec_lib._ephemeral_low()
  assert all(spec_lib._LOWEST_PICKED_PORT <= p < low for p in cluster_lib.pick_unused_ports(64))
  # With no room below it (a machine whose ephemeral range starts low), any free port.
  monkeypatch.setattr(spec_lib, "_ephemeral_low", lambda: spec_lib._LOWEST_PICKED_PORT)
  assert len(set(cluster_lib.pick_unused_ports(8))) == 8


def test_a_port_for_a_nodes_own_address_is_picked_the_same_way():
  # Before: Ray's bundles took the kernel's own free port, and a task of a Ray launch
  # once found it taken ("Address already in use") beside another test run.
  low = spec_lib._ephemeral_low()
  for _ in range(16):
    port = spec_lib.free_port_at("127.0.0.1")
    assert spec_lib._LOWEST_PICKED_PORT <= port < low


def test_a_spec_is_immutable_and_hashable():
  # Before: attributes and the jobs dict could be changed in place, and a spec
  # defined __eq__ without __hash__, so it could not be a dict key or set member.
  spec = ClusterSpec.from_dict({"worker": ["h:1", "h:2"]}, task={"type": "worker", "index": 1})
  with pytest.raises(AttributeError, match=r"ClusterSpec is immutable.*Received: task="):
    spec.task = None
  with pytest.raises(TypeError):
    spec.jobs["ps"] = ("h:3",)
  same = ClusterSpec.from_dict({"worker": ["h:1", "h:2"]}, task={"type": "worker", "index": 1})
  assert same == spec and hash(same) == hash(spec) and len({spec, same}) == 1
  assert len({spec, spec.with_task("worker", 0)}) == 2


def test_free_ports_are_picked_on_the_loopback_family_asked_for():
  import socket
  ports = pick_unused_ports(3, host="::1") if socket.has_ipv6 else ()
  for port in ports:  # Before: bound on 127.0.0.1 whatever the host.
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
      s.bind(("::1", port))
  assert len(set(pick_unused_ports(3))) == 3
  with pytest.raises(ValueError, match=r"`host` must be a loopback address.*Received: '10.0.0.1'"):
    pick_unused_ports(1, host="10.0.0.1")
