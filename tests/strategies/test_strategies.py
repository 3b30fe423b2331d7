"""tfdist.strategies: every strategy from its name trains unchanged Keras code."""

import json
import logging
import re
import time

import numpy as np
import pytest
import tensorflow as tf

import helpers
import tfdist
from tfdist import keras
from tfdist import strategies

LOCAL = [("one_device", {}), ("default", {}), ("mirrored", {}),
         ("mirrored", {"cross_device_ops": "reduction_to_one_device"}),
         ("mirrored", {"cross_device_ops": "hierarchical_copy"}),
         ("central_storage", {}), ("multi_worker_mirrored", {})]


def regression_data():
  rng = np.random.default_rng(0)
  x = rng.random((256, 4)).astype("float32")
  y = x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")
  return x, y


def build_and_fit(strategy, epochs=5):
  """The user's Keras code, identical for every strategy."""
  x, y = regression_data()
  keras.utils.set_random_seed(1)
  with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
  history = model.fit(x, y, batch_size=32, epochs=epochs, shuffle=False, verbose=0)
  return model, history.history["loss"]


@pytest.mark.parametrize("name, options", LOCAL, ids=lambda v: str(v))
def test_fit_evaluate_predict(name, options):
  strategy = tfdist.make_strategy(name, **options)
  model, losses = build_and_fit(strategy)
  assert losses[-1] < 0.2 * losses[0], losses
  x, y = regression_data()
  assert model.evaluate(x, y, verbose=0) < 0.2 * losses[0]
  assert model.predict(x, verbose=0).shape == (256, 1)


@pytest.mark.parametrize("name", ["mirrored", "central_storage"])
def test_sync_strategies_match_single_device(name):
  strategy = tfdist.make_strategy(name)
  assert strategy.num_replicas_in_sync == 2
  model, losses = build_and_fit(strategy)
  reference, reference_losses = build_and_fit(tfdist.make_strategy("one_device"))
  np.testing.assert_allclose(losses, reference_losses, rtol=1e-4)
  for weight, expected in zip(model.weights, reference.weights):
    np.testing.assert_allclose(weight.numpy(), expected.numpy(), rtol=1e-4, atol=1e-6)


def test_mirrored_replicas_hold_identical_weights():
  model, _ = build_and_fit(tfdist.make_strategy("mirrored"))
  for weight in model.weights:
    copies = [v.numpy() for v in weight.values]
    assert len(copies) == 2
    np.testing.assert_array_equal(copies[0], copies[1])
    assert {v.device.split(":")[-1] for v in weight.values} == {"0", "1"}


def test_central_storage_keeps_one_copy_on_the_cpu():
  model, _ = build_and_fit(tfdist.make_strategy("central_storage"))
  assert model.weights[0].device.endswith("CPU:0")


def test_registry_names():
  assert strategies.available_strategies() == [
      "central_storage", "default", "mirrored", "multi_worker_mirrored", "one_device",
      "parameter_server"]


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


class TestNcclFallback:
  """NCCL cannot run on CPUs: selectable, validated, and a logged fallback."""

  def test_mirrored_nccl_falls_back_to_reduction_to_one_device(self, caplog):
    with caplog.at_level(logging.WARNING, logger="tfdist"):
      strategy = tfdist.make_strategy("mirrored", cross_device_ops="nccl")
    assert "cross_device_ops='nccl' needs 2 or more GPUs" in caplog.text
    assert "falling back to 'reduction_to_one_device'" in caplog.text
    assert isinstance(strategy.extended._cross_device_ops, tf.distribute.ReductionToOneDevice)
    _, losses = build_and_fit(strategy)
    assert losses[-1] < losses[0]

  def test_multi_worker_nccl_falls_back_to_ring(self, caplog):
    with caplog.at_level(logging.WARNING, logger="tfdist"):
      strategy = tfdist.make_strategy("multi_worker_mirrored", communication="nccl")
    assert "communication='nccl' runs only on GPUs" in caplog.text
    assert "falling back to 'ring'" in caplog.text
    assert strategy.extended._communication_options.implementation == \
        tf.distribute.experimental.CommunicationImplementation.RING


@pytest.mark.slow
def test_parameter_server_in_process_fit_evaluate_predict_and_sharding():
  result = helpers.run(helpers.python(f"{helpers.SCRIPTS}/pss_train.py", "2"), timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  line = next(l for l in result.stdout.splitlines() if l.startswith("RESULT "))
  report = json.loads(line[len("RESULT "):])
  assert report["losses"][-1] < 0.05 * report["losses"][0]
  assert report["eval_loss"] < 0.05 * report["losses"][0]
  assert report["predictions_shape"] == [256, 1]
  assert report["prediction_mse"] < 0.05 * report["losses"][0]
  # num_ps_shards=2: the kernel is split across both ps tasks.
  assert sorted(d.split("/task:")[1][0] for d in report["kernel_shards"]) == ["0", "1"]
  assert all("/job:ps/" in d for d in report["kernel_shards"])
  assert report["one_coordinator"]
  # On the host network, the servers' exposure is said out loud.
  assert "TensorFlow servers listen on every interface of this machine" in result.stdout


class TestCentralStorageWithSchedules:
  """tf_keras schedules fail under TF's CentralStorageStrategy; tfdist's trains."""

  def fit_with_schedule(self, strategy):
    x, y = regression_data()
    with strategy.scope():
      model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
      schedule = keras.optimizers.schedules.CosineDecay(0.05, decay_steps=40)
      model.compile(optimizer=keras.optimizers.Adam(schedule), loss="mse")
    return model.fit(x, y, batch_size=32, epochs=5, verbose=0).history["loss"]

  def test_raw_tensorflow_fails(self):
    raw = tf.distribute.experimental.CentralStorageStrategy(["/cpu:0", "/cpu:1"])
    with pytest.raises(ValueError, match="You must specify an aggregation method"):
      self.fit_with_schedule(raw)

  def test_tfdist_trains(self):
    losses = self.fit_with_schedule(tfdist.make_strategy("central_storage"))
    assert losses[-1] < losses[0]


class TestCentralStorageWithKeras3State:
  """Keras 3 batch norm and dropout fail under TF's CentralStorageStrategy; tfdist's trains."""

  def fit(self, strategy):
    import keras as keras3
    x = np.random.default_rng(0).random((64, 8, 8, 1)).astype("float32")
    y = np.random.default_rng(1).random((64, 10)).astype("float32")
    keras3.utils.set_random_seed(0)
    with strategy.scope():
      model = keras3.Sequential([
          keras3.Input((8, 8, 1)), keras3.layers.Conv2D(4, 3),
          keras3.layers.BatchNormalization(), keras3.layers.Flatten(),
          keras3.layers.Dropout(0.2), keras3.layers.Dense(10)])
      model.compile(optimizer="sgd", loss="mse")
    history = model.fit(x, y, batch_size=16, epochs=3, verbose=0, shuffle=False)
    return model, history.history["loss"]

  def test_raw_tensorflow_fails(self):
    raw = tf.distribute.experimental.CentralStorageStrategy(["/cpu:0", "/cpu:1"])
    with pytest.raises(ValueError, match="You must specify an aggregation method"):
      self.fit(raw)

  def test_tfdist_trains_and_updates_the_moving_statistics(self):
    model, losses = self.fit(tfdist.make_strategy("central_storage"))
    assert losses[-1] < losses[0]
    moving_mean = model.layers[1].moving_mean
    assert np.abs(np.asarray(moving_mean)).max() > 1e-3  # Initialized at 0; updated.
    # The same training under mirrored, which keeps every replica's statistics.
    mirrored, _ = self.fit(tfdist.make_strategy("mirrored"))
    np.testing.assert_allclose(moving_mean, mirrored.layers[1].moving_mean, atol=1e-3)


def test_many_mirrored_strategies_in_one_process():
  """tensorflow/tensorflow#62790: TF's default collectives abort on the second strategy."""
  for units in (3, 5, 7):  # Different shapes each time, as different models have.
    strategy = tfdist.make_strategy("mirrored")
    x, y = regression_data()
    with strategy.scope():
      model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(units),
                                keras.layers.Dense(1)])
      model.compile(optimizer="sgd", loss="mse")
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)


def test_many_raw_mirrored_strategies_abort_in_tensorflow():
  code = """
import tfdist
tfdist.devices.split_physical_device(2)
import numpy as np, tensorflow as tf
from tfdist import keras
x = np.ones((64, 4), "float32"); y = np.ones((64, 1), "float32")
for units in (3, 5):
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(units), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
  model.fit(x, y, batch_size=32, epochs=1, verbose=0)
print("NO ERROR")
"""
  result = helpers.run(helpers.python("-c", code), timeout=120)
  assert "Shape mismatch in the collective instance" in result.stdout, result.stdout[-2000:]


@pytest.mark.slow
def test_a_peer_lost_mid_training_is_an_error_in_bounded_time(tmp_path):
  # No launcher here: nothing stops worker 0 but TensorFlow's coordination
  # service, whose heartbeats notice the dead peer.
  spec = tfdist.ClusterSpec.local(workers=2)
  command = helpers.python(f"{helpers.SCRIPTS}/mwms_long.py", str(tmp_path))
  with helpers.spawned(command, env={"TF_CONFIG": spec.tf_config("worker", 0)}) as w0, \
      helpers.spawned(command, env={"TF_CONFIG": spec.tf_config("worker", 1)}) as w1:
    helpers.wait_for_files(tmp_path, 2)
    w1.kill()
    killed_at = time.monotonic()
    out, _ = w0.communicate(timeout=120)
    seconds = time.monotonic() - killed_at
  assert w0.returncode == 1
  assert re.search(r"UnavailableError|unhealthy|Connection reset by peer", out), out[-2000:]
  # Bounded, not fast: a reset connection is often noticed at once (1.4 s
  # here), else the coordination service's 10 s heartbeat timeout plus its
  # propagation to worker 0 (20.7 s once under CI load). A hang would run
  # into communicate's 120 s; the README says 10-20 s.
  assert seconds < 60, seconds


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["tf_keras", "keras3"])
def test_two_worker_evaluate_counts_every_example_once(flavour):
  # 1001 examples, global batch 64: each worker's last batch is partial.
  results = helpers.launched_results("evaluate_count.py", flavour,
                                     launch_flags=[f"--keras={flavour}"])
  assert sorted(worker for worker, _ in results) == [0, 1]
  for _, counted in results:
    assert counted["examples"] == 1001
    assert counted["loss"] == pytest.approx(counted["true_loss"], rel=1e-5)


@pytest.mark.slow
def test_two_workers_with_two_devices_each_are_four_replicas_equal_to_one_device():
  results = dict(helpers.launched_results("devices_per_worker.py"))
  first, second = results[0], results[1]
  assert first["replicas"] == 4
  assert second["devices"] == ["/job:worker/replica:0/task:1/device:CPU:0",
                               "/job:worker/replica:0/task:1/device:CPU:1"]
  assert first["weights"] == second["weights"]  # Identical on both workers.
  assert first["losses"][-1] < 0.5 * first["losses"][0]
  assert first["single_device_difference"] < 1e-5


@pytest.mark.parametrize("flavour", ["tf_keras", "keras3"])
def test_jit_compile_trains_where_xla_can_and_is_refused_before_a_step_elsewhere(flavour):
  k = __import__("keras") if flavour == "keras3" else keras
  x, y = regression_data()
  for name in ("one_device", "central_storage", "mirrored"):
    with tfdist.make_strategy(name).scope():
      model = k.Sequential([k.Input((4,)), k.layers.Dense(1)])
      model.compile(optimizer=k.optimizers.SGD(0.05), loss="mse", jit_compile=True)
    before = [np.array(w) for w in model.get_weights()]
    if name != "mirrored":
      losses = model.fit(x, y, batch_size=32, epochs=3, verbose=0).history["loss"]
      assert losses[-1] < losses[0], name
      continue
    # Raw TF fails inside the step: "Trying to access resource ... on a different device".
    with pytest.raises(ValueError, match=r"jit_compile=True cannot run under mirrored: XLA "
                       r"compiles each replica's step for one device.*Compile with "
                       r"jit_compile=False.*Received: a step compiled with XLA"):
      model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    for a, b in zip(before, model.get_weights()):
      np.testing.assert_array_equal(a, b)  # Refused before the first step.


@pytest.mark.slow
def test_jit_compile_is_refused_across_cpu_workers_and_parameter_servers():
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--workers=2", "--", *helpers.python(f"{helpers.SCRIPTS}/xla_fit.py",
                                                    "multi_worker_mirrored", "tf_keras")),
      timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  for worker in (0, 1):  # tf_keras's tracing puts "in user code:" before the message.
    assert re.search(rf"\[worker:{worker}\] .*ValueError: jit_compile=True cannot run under "
                     r"multi_worker_mirrored: XLA has no collectives for CPU devices",
                     result.stdout), result.stdout[-3000:]
    assert re.search(rf"\[worker:{worker}\] .*\| weights moved: False", result.stdout)
  result = helpers.run(helpers.python(f"{helpers.SCRIPTS}/xla_fit.py", "parameter_server",
                                      "tf_keras"), timeout=300)
  assert re.search(r"ValueError: jit_compile=True cannot run under parameter_server: a "
                   r"worker's XLA-compiled step cannot read variables that live on the ps "
                   r"tasks", result.stdout), result.stdout[-3000:]
  assert "| weights moved: False" in result.stdout
