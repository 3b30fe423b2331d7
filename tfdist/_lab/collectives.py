"""What one training step communicates: the collective ops in a traced Keras step.

Under MultiWorkerMirroredStrategy every cross-worker reduction in a step is a
collective op in the step's graph (`CollectiveReduceV2` for RING, `NcclAllReduce`
for NCCL), and each is at least one network round trip. Counting them, with
their bytes, says what a step costs in synchronisation before timing it: the
gradients' all-reduce (one op per pack), and, in tf_keras's own `fit` step,
each compiled metric's total and count read across workers, and the reduction
of the step's outputs that `keras_support.set_distribute_reduction_method`
removes. `tfdist.training.fit_step` packs the metrics into the gradients' all-reduce.
A finite dataset adds TF's 8-byte "does every worker still have data" check.
"""

import dataclasses
from typing import List, Tuple

import tensorflow as tf

COLLECTIVE_OPS = frozenset({
    "CollectiveReduce", "CollectiveReduceV2", "CollectiveReduceV3", "CollectiveGather",
    "CollectiveGatherV2", "CollectiveAllToAllV2", "CollectiveAllToAllV3",
    "CollectiveBcastSend", "CollectiveBcastSendV2", "CollectiveBcastRecv",
    "CollectiveBcastRecvV2", "NcclAllReduce"})


@dataclasses.dataclass(frozen=True)
class StepCollectives:
  """The collective ops one call of a traced step launches."""

  ops: List[Tuple[str, int]]  # (op name, payload bytes; -1 where the shape is unknown)

  @property
  def count(self) -> int:
    return len(self.ops)

  @property
  def bytes(self) -> int:
    return sum(size for _, size in self.ops if size > 0)

  def __str__(self) -> str:
    return f"{self.count} collectives, {self.bytes / 1024:.1f} KB"


def _payload(op: tf.Operation) -> int:
  shape = op.inputs[0].shape if op.inputs else tf.TensorShape(None)
  if not shape.is_fully_defined():
    return -1
  return shape.num_elements() * op.inputs[0].dtype.size


def count(concrete_function) -> StepCollectives:
  """The collectives of a concrete (traced) function, nested functions included."""
  graph = concrete_function.graph
  ops = [(op.name, _payload(op)) for op in graph.get_operations() if op.type in COLLECTIVE_OPS]
  # Functions called from the step (e.g. a loop body) hold theirs in the library,
  # where shapes are not kept.
  for function in graph.as_graph_def().library.function:
    ops += [(f"{function.signature.name}/{node.name}", -1) for node in function.node_def
            if node.op in COLLECTIVE_OPS]
  return StepCollectives(ops)


def per_step(model, iterator) -> StepCollectives:
  """The collectives of `model`'s train step traced for `iterator` (after `make_train_function`).

  Tracing runs nothing; a step already traced for such an iterator is reused.
  """
  return count(model.train_function.get_concrete_function(iterator))
