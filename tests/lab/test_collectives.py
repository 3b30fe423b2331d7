"""tfdist._lab.collectives: the collective ops in a traced step, and their bytes."""

import tensorflow as tf

from tfdist._lab import collectives


def _all_reduce(x):
  # Traced only, never run: a 2-member group that does not exist.
  return tf.raw_ops.CollectiveReduceV2(input=x, group_size=2, group_key=1, instance_key=1,
                                       ordering_token=[], merge_op="Add", final_op="Id")


def test_counts_each_collective_and_its_bytes_nested_ones_too():
  @tf.function
  def inner(x):
    return _all_reduce(x)

  @tf.function
  def step(x, y):
    return _all_reduce(x), _all_reduce(y), inner(x), x + 1.0

  traced = step.get_concrete_function(tf.TensorSpec([4], tf.float32),
                                      tf.TensorSpec([2, 3], tf.float16))
  counted = collectives.count(traced)
  assert counted.count == 3  # Two in the step, one in the function it calls.
  assert counted.bytes == 4 * 4 + 6 * 2  # The nested one's shape is not kept.
  assert str(counted) == "3 collectives, 0.0 KB"


def test_a_step_without_collectives_counts_none():
  traced = tf.function(lambda x: x * 2.0).get_concrete_function(tf.TensorSpec([4]))
  assert collectives.count(traced).count == 0
