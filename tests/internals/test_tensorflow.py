"""tfdist.internals.tensorflow: TensorFlow's private code, used in one place and undone."""

import tensorflow as tf

import tfdist
from tfdist.internals import tensorflow as tf_internals


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
