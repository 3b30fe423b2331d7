"""tfdist.internals.tensorflow: TensorFlow's private code, used in one place and undone."""

import os
import subprocess
import sys

import pytest
import tensorflow as tf

import tfdist
from tfdist.internals import tensorflow as tf_internals
from tfdist.launch import private_network

# Version-sensitive: `make test-versions` runs it on the oldest and newest supported TensorFlow too.
pytestmark = pytest.mark.versions


def test_the_installed_tensorflow_is_one_tfdist_was_tested_with():
  low, high = tf_internals.TESTED
  assert low <= tf_internals.version() <= high, tf.__version__


def test_logical_cpu_replicas_changes_tensorflow_only_inside_the_block():
  from tensorflow.python.distribute import collective_all_reduce_strategy as collective
  extended = collective.CollectiveAllReduceExtended
  original = extended._initialize_local_devices
  with tf_internals.logical_cpu_replicas(2) as applied:
    assert applied and extended._initialize_local_devices is not original
  assert extended._initialize_local_devices is original


def test_reads_of_private_state():
  assert not tf_internals.is_multi_worker_mirrored(tfdist.make_strategy("one_device"))
  assert tf_internals.shards(tf.Variable(1.0)) is None
  graph = tf_internals.dataset_graph(tf.data.Dataset.range(3).map(lambda x: x + 1))
  assert {"RangeDataset", "MapDataset"} <= {node.op for node in graph.node}
  assert tf_internals.smart_cond(tf.constant(True), lambda: 1, lambda: 2) == 1


@pytest.mark.slow
def test_the_coordination_service_store_is_used_only_once_a_strategy_started_it():
  # Before a strategy, nothing is published or read (and TF's context is left unmade). A
  # one-worker MultiWorkerMirroredStrategy starts the service: a value set twice (the store
  # refuses a key it holds) reads as the last; a key never set is None once its wait is over.
  code = (
      "import tensorflow as tf\n"
      "from tensorflow.python.eager import context\n"
      "from tfdist.internals import tensorflow as tf_internals\n"
      "assert not tf_internals.coordination_service_up()\n"
      "assert tf_internals.publish('tfdist/k', 'v') is False\n"
      "assert tf_internals.published('tfdist/k', 10) is None\n"
      "assert not context.context()._initialized\n"
      "tf.distribute.MultiWorkerMirroredStrategy()\n"
      "assert tf_internals.coordination_service_up()\n"
      "assert tf_internals.publish('tfdist/k', 'one') and tf_internals.publish('tfdist/k', 'two')\n"
      "print(tf_internals.published('tfdist/k', 50), tf_internals.published('tfdist/none', 50))\n")
  spec = tfdist.ClusterSpec.local(1)
  env = dict(os.environ, TF_CONFIG=spec.tf_config("worker", 0))
  # TF's server listens on every interface: the worker runs in a loopback-only network.
  with private_network.enter("loopback", spec, lambda message: None) as prefix:
    result = subprocess.run([*prefix, sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=120)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.split() == ["two", "None"], result.stdout
