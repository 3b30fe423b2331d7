"""tfdist/_lab/all_reduce_family.py: the all-reduce family, counted, and run with TensorFlow."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfdist._lab import all_reduce_family as family

ALGORITHMS = family.ALL_REDUCE_ALGORITHMS
# 840 is divisible by every N in 2..8; 841 by none of them but 1.
SIZES = (0, 1, 7, 840, 841)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_schedule_sums_and_counts_what_the_formulas_say(algorithm):
  for nodes in range(1, 9):
    for size in SIZES:
      schedule = family.all_reduce_schedule(algorithm, nodes, size)
      vectors = np.random.default_rng(nodes).integers(-99, 99, (nodes, size)).tolist()
      assert schedule.simulate(vectors) == [np.sum(vectors, axis=0).tolist()] * nodes
      cost = family.textbook_cost(algorithm, nodes, size)
      assert (schedule.num_steps, sum(schedule.bytes_sent())) == (cost.steps, cost.total_bytes)
      assert sum(schedule.bytes_received()) == cost.total_bytes
      if size == 840:
        assert max(schedule.bytes_sent()) == cost.node_bytes, (nodes, schedule.bytes_sent())
        assert schedule.max_link_bytes() == cost.link_bytes, (nodes, schedule.link_bytes())
      elif size == 841:  # within one element of every slice a node sends
        assert abs(max(schedule.bytes_sent()) - cost.node_bytes) <= 4 * 2 * nodes


def test_the_textbook_formulas_for_eight_nodes():
  N, n = 8, 4 * 840  # bytes of one vector
  counted = {a: family.all_reduce_schedule(a, N, 840) for a in ALGORITHMS}
  steps = {a: s.num_steps for a, s in counted.items()}
  assert steps == {"all_to_all": 1, "master_worker": 2, "tree": 2 * 3, "round_robin": 2 * (N - 1),
                   "butterfly": 2 * 3, "ring": 2 * (N - 1)}
  node = {a: max(s.bytes_sent()) for a, s in counted.items()}
  assert node["all_to_all"] == (N - 1) * n
  assert node["master_worker"] == (N - 1) * n == counted["master_worker"].bytes_received()[0]
  assert node["ring"] == node["butterfly"] == node["round_robin"] == 2 * (N - 1) * n // N
  # Tree: n on every link of every step; the root sends once per level.
  assert counted["tree"].step_bytes() == [n] * 6 and node["tree"] == 3 * n
  assert counted["round_robin"].max_link_bytes() == 2 * n // N
  assert len(counted["round_robin"].link_bytes()) == N * (N - 1)
  assert len(counted["ring"].link_bytes()) == N
  assert counted["ring"].max_link_bytes() == 2 * (N - 1) * n // N
  # Butterfly: the messages halve, then double.
  assert counted["butterfly"].step_bytes() == [n // 2, n // 4, n // 8, n // 8, n // 4, n // 2]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_tensorflow_computes_the_sum_on_every_node(algorithm):
  for nodes in (2, 3, 4, 5, 8):
    # Eight nodes on two logical CPUs: a node's device does not change the sum.
    devices = [f"/cpu:{i % 2}" for i in range(nodes)]
    for size in (7, 1001):  # neither divisible by 2, 3, 4, 5 or 8
      schedule = family.all_reduce_schedule(algorithm, nodes, size)
      x = np.random.default_rng(size).uniform(-1, 1, (nodes, size)).astype("float32")
      summed = tf.function(family.run_all_reduce)(schedule, [tf.constant(v) for v in x], devices)
      for s in summed:
        np.testing.assert_allclose(s.numpy(), x.astype("float64").sum(axis=0), rtol=1e-6,
                                   atol=1e-6, err_msg=f"{algorithm}, {nodes} nodes, {size}")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_each_message_is_one_copy_between_devices(algorithm):
  # Two nodes on two devices: the graph copies exactly the schedule's bytes across.
  schedule = family.all_reduce_schedule(algorithm, 2, 10)
  devices = ["/cpu:0", "/cpu:1"]
  graph = tf.function(family.run_all_reduce).get_concrete_function(
      schedule, [tf.TensorSpec([10])] * 2, devices).graph
  copies = [(op.inputs[0].op.device[-1], op.device[-1], op.inputs[0].shape.num_elements() * 4)
            for op in graph.get_operations() if op.type == "Identity" and op.inputs
            and op.inputs[0].op.device and op.device and op.inputs[0].op.device != op.device]
  expected = [(str(t.source), str(t.destination), t.elements * 4)
              for r in schedule.rounds for t in r]
  assert sorted(copies) == sorted(expected)


def test_bad_arguments_are_refused_with_what_was_received():
  with pytest.raises(ValueError, match=r"`algorithm` must be one of \['all_to_all'.*Received: "
                     r"algorithm='hypercube'"):
    family.all_reduce_schedule("hypercube", 4, 10)
  with pytest.raises(ValueError, match=r"`nodes` must be an integer >= 1. Received: nodes=0"):
    family.textbook_cost("ring", 0, 10)
  with pytest.raises(ValueError, match=r"`size` must be an integer >= 0.*Received: size=2.5"):
    family.all_reduce_schedule("ring", 2, 2.5)
  with pytest.raises(ValueError, match=r"run_all_reduce needs one vector and one device per "
                     r"node: the schedule has 3 node\(s\).*Received: 2 vector\(s\), "
                     r"3 device\(s\)"):
    family.run_all_reduce(family.all_reduce_schedule("ring", 3, 4), [tf.ones(4)] * 2,
                         ["/cpu:0"] * 3)


def test_nodes_that_are_not_a_power_of_two():
  # Five nodes: three levels of the tree each way; the butterfly folds one node in.
  assert family.all_reduce_schedule("tree", 5, 8).num_steps == 2 * math.ceil(math.log2(5))
  assert family.all_reduce_schedule("butterfly", 5, 8).num_steps == 2 * 2 + 2
