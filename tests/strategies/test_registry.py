"""tfdist.strategies._registry: names, options, and the errors each strategy's check raises."""

import pytest
import tensorflow as tf

import tfdist
from tfdist import strategies


def test_registry_names():
  assert strategies.available_strategies() == [
      "central_storage", "default", "mirrored", "multi_worker_mirrored", "one_device",
      "parameter_server"]


def test_each_registered_strategy_has_the_traits_the_mains_derive_from():
  from tfdist import _choices as choices
  # The registry and the TensorFlow-free traits name the same strategies, in one order.
  assert strategies.STRATEGIES.names() == choices.strategy_names()
  for name, entry in strategies.STRATEGIES.items():
    assert entry.traits is choices.strategy(name)
    # A strategy that runs over a cluster is the one that checks it.
    assert entry.traits.takes_cluster == (entry.check_cluster is not None), name
  # Each kind's strategies build TensorFlow's class of that kind.
  built = {name: type(tfdist.make_strategy(name)) for name in choices.strategy_names(
      choices.DEFAULT, choices.SINGLE_MACHINE)}
  assert {name: cls.__name__ for name, cls in built.items()} == {
      "default": "_DefaultDistributionStrategy", "one_device": "OneDeviceStrategy",
      "mirrored": "MirroredStrategy", "central_storage": "CentralStorageStrategy"}
  # copy_per_replica: MirroredStrategy's variables are mirrored, CentralStorage's are not.
  with tfdist.make_strategy("mirrored").scope():
    mirrored = tf.Variable(1.0)
  with tfdist.make_strategy("central_storage").scope():
    central = tf.Variable(1.0)
  assert type(mirrored).__name__ == "MirroredVariable"
  assert type(central).__name__ != "MirroredVariable"
  with pytest.raises(ValueError, match=r"Unknown strategy name. Valid names: \['default', "
                     r"'one_device'.*Received: 'mirorred'"):
    choices.strategy("mirorred")


def test_the_options_users_choose_by_name_are_options_of_the_builder():
  # tests/cli/test_train.py: `tfdist train` offers each as a flag with those values.
  import inspect
  from tfdist import _choices as choices
  chosen = 0
  for name, entry in strategies.STRATEGIES.items():
    for option, _ in entry.traits.choices:
      assert option in inspect.signature(entry.builder).parameters, (name, option)
      chosen += 1
  assert chosen == 2  # mirrored's cross_device_ops, multi_worker_mirrored's communication.
  with pytest.raises(ValueError, match=r"`keras3_fit` must be one of \['fits', "
                     r"'fails with 2\+ workers', 'no fit'\]\. Received: keras3_fit='yes' "
                     r"for strategy 'yours'"):
    strategies.StrategyTraits("yours", choices.SINGLE_MACHINE, copy_per_replica=True,
                              keras3_fit="yes")


def test_a_strategy_tfdist_does_not_know_registers_without_traits(monkeypatch):
  from tfdist import _choices as choices
  from tfdist import _registry as base
  from tfdist.strategies import _registry as registry
  monkeypatch.setattr(registry, "STRATEGIES", base.Registry("strategy"))
  assert registry.register("mine", tf.distribute.OneDeviceStrategy).traits is None
  assert registry.register("mirrored", tf.distribute.MirroredStrategy).traits is (
      choices.strategy("mirrored"))
  given = strategies.StrategyTraits("yours", choices.SINGLE_MACHINE, copy_per_replica=True)
  with pytest.raises(ValueError, match=r"`kind` must be one of \['default', 'single machine', "
                     r"'multi-worker collective', 'parameter server'\]\. Received: "
                     r"kind='single' for strategy 'yours'"):
    strategies.StrategyTraits("yours", "single", copy_per_replica=True)
  assert registry.register("yours", tf.distribute.MirroredStrategy, traits=given).traits is given


class TestErrors:

  def test_unknown_name_lists_valid_ones(self):
    with pytest.raises(ValueError, match=r"Unknown strategy name. Valid names: \['central_storage'"
                       r".*Received: 'mirorred'"):
      tfdist.make_strategy("mirorred")

  def test_unknown_option_lists_valid_ones(self):
    with pytest.raises(TypeError, match=r"Strategy 'mirrored' does not take option\(s\) "
                       r"\['communication'\]. Its options: \['devices', 'cross_device_ops'\]"):
      tfdist.make_strategy("mirrored", communication="ring")

  def test_bad_cross_device_ops(self):
    with pytest.raises(ValueError, match=r"`cross_device_ops` must be one of \['auto', 'nccl', "
                       r"'hierarchical_copy', 'reduction_to_one_device'\]. Received: 'ring'"):
      tfdist.make_strategy("mirrored", cross_device_ops="ring")

  def test_missing_device(self):
    with pytest.raises(ValueError, match=r"names a device this process does not have.*"
                       r"split_physical_device.*Received: '/cpu:7'"):
      tfdist.make_strategy("mirrored", devices=["/cpu:0", "/cpu:7"])

  def test_malformed_device(self):
    with pytest.raises(ValueError, match=r"not a device name.*Received: 'gpu0'"):
      tfdist.make_strategy("one_device", device="gpu0")

  def test_devices_must_be_a_list(self):
    with pytest.raises(ValueError, match=r"non-empty list.*Received: devices='/cpu:0'"):
      tfdist.make_strategy("mirrored", devices="/cpu:0")

  @pytest.mark.parametrize("options, match", [
      ({"communication": "mpi"}, r"`communication` must be one of \['auto', 'ring', 'nccl'\]. "
       r"Received: 'mpi'"),
      ({"bytes_per_pack": -1}, r"`bytes_per_pack` must be an integer >= 0.*Received: -1"),
      ({"timeout_seconds": 0}, r"`timeout_seconds` must be > 0.*Received: 0"),
      ({"cluster": "localhost:2222"}, r"`cluster` must be a tfdist.ClusterSpec"),
      ({"devices_per_worker": 0}, r"`devices_per_worker` must be an integer >= 1, or None "
       r"for TF's choice. Received: devices_per_worker=0"),
      # conftest split the CPU into 2.
      ({"devices_per_worker": 3}, r"`devices_per_worker=3` needs that many logical CPUs on "
       r"each worker: call tfdist.devices.split_physical_device\(3\) before make_strategy. "
       r"Received: devices_per_worker=3, logical CPUs=2$"),
  ])
  def test_bad_multi_worker_options(self, options, match):
    with pytest.raises((ValueError, TypeError), match=match):
      tfdist.make_strategy("multi_worker_mirrored", **options)

  def test_multi_worker_cannot_use_ps(self):
    spec = tfdist.ClusterSpec.local(workers=2, ps=1).with_task("worker", 0)
    with pytest.raises(ValueError, match=r"multi_worker_mirrored cannot use `cluster.ps`.*"
                       r"parameter_server.*Received: cluster.ps=\['localhost:\d+'\]"):
      tfdist.make_strategy("multi_worker_mirrored", cluster=spec)

  def test_parameter_server_needs_ps(self):
    spec = tfdist.ClusterSpec.local(workers=2, chief=True).with_task("chief", 0)
    with pytest.raises(ValueError, match=r"parameter_server needs a `cluster.ps` job.*"
                       r"Received: ClusterSpec\(chief="):
      tfdist.make_strategy("parameter_server", cluster=spec)

  @pytest.mark.parametrize("task_type", ["worker", "ps"])
  def test_parameter_server_without_a_chief_is_refused_on_every_task(self, task_type,
                                                                      monkeypatch):
    # Before: a worker or ps task of such a TF_CONFIG served forever, silently.
    spec = tfdist.ClusterSpec.local(workers=2, ps=1)
    monkeypatch.setenv("TF_CONFIG", spec.tf_config(task_type, 0))
    match = (r"parameter_server needs a `cluster.chief` task: the chief is the coordinator.*"
             r"tfdist launch --workers 2 --ps 1 -- python train\.py.*Received: jobs \['ps', 'worker'\] "
             rf"and no chief, on task {task_type}:0$")
    with pytest.raises(ValueError, match=match):
      tfdist.make_strategy("parameter_server")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    with pytest.raises(ValueError, match=match):
      tfdist.make_strategy("parameter_server", cluster=resolver)

  def test_an_in_process_cluster_on_the_host_network_is_refused_unless_accepted(self):
    # Before: its servers started on every interface of this machine, silently.
    with pytest.raises(ValueError, match=r"would listen on every interface of this machine.*"
                       r"tfdist train --in_process.*network='host'.*Received: "
                       r"network='loopback' on a network with \["):
      tfdist.make_strategy("parameter_server", in_process=True)
    with pytest.raises(ValueError, match=r"`network` must be one of \['loopback', 'host'\]. "
                       r"Received: 'lan'"):
      tfdist.make_strategy("parameter_server", in_process=True, network="lan")

  def test_parameter_server_needs_a_cluster(self):
    with pytest.raises(ValueError, match=r"parameter_server needs a cluster.*in_process=True.*"
                       r"Received: cluster=None and no TF_CONFIG"):
      tfdist.make_strategy("parameter_server")

  @pytest.mark.parametrize("options, match", [
      ({"num_ps_shards": 2, "min_shard_bytes": 10}, r"at most one of `num_ps_shards`"),
      ({"num_ps_shards": 0}, r"`num_ps_shards` must be an integer >= 1. Received: 0"),
  ])
  def test_bad_partitioner(self, options, match):
    with pytest.raises(ValueError, match=match):
      tfdist.make_strategy("parameter_server", **options)
