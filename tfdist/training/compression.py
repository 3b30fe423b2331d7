"""All-reduce gradients in half precision: half the bytes on the wire.

Data-parallel training sums every gradient across replicas each step. When
the all-reduce, not the compute, sets the step time (large gradients, small
per-replica batches, slow networks), sending float16 instead of float32 halves
the bytes. The optimizer still applies float32 gradients to float32 variables;
only the sum travels in half precision.

The price: float16 keeps 11 bits of mantissa (about 3 decimal digits), and
its range is narrow: sums above 65504 overflow to inf, and values below about
6e-8 flush to zero, which small gradients do, because the loss is divided by
the global batch before the all-reduce. So the gradients travel scaled, as
loss scaling does it for float16 training (TF's mixed-precision guide): they
are multiplied by a power of two (`INITIAL_WIRE_SCALE`) before the cast and
divided by it after the sum. When a sum is not finite, the step is skipped
(the weights and the optimizer's state stay as they were, its step count
moves on) and the scale is halved; after `GROWTH_STEPS` finite sums in a row
it doubles, so gradients that shrink as training converges keep their
digits. Every replica sees the same sums, so all of them skip together.

Example:

    >>> with strategy.scope():
    ...   model = make_model()
    ...   model.compile(optimizer=compress_gradients(keras.optimizers.SGD(0.1)), loss=...)
"""

from typing import TYPE_CHECKING

import tensorflow as tf

from tfdist import _keras_support as keras_support
from tfdist.internals import tensorflow as tf_internals

if TYPE_CHECKING:  # Annotations only: Keras 3 alone has no tf_keras.
  import tf_keras

DTYPES = ("float16",)
INITIAL_WIRE_SCALE = 2.0 ** 12  # Sums of gradients up to 16 fit; smaller ones keep digits.
GROWTH_STEPS = 1000  # Finite sums in a row before the scale doubles.


def aggregates_here(skip_gradients_aggregation: bool, kwargs: dict) -> bool:
  """Whether a wrapped `apply_gradients` must aggregate the replicas' gradients itself.

  Not when the caller aggregated them already (`skip_gradients_aggregation`, or
  tf_keras's older `experimental_aggregate_gradients=False`, popped from
  `kwargs`), nor outside a replica context or with one replica.
  """
  context = tf.distribute.get_replica_context()
  return not (skip_gradients_aggregation or context is None
              or context.num_replicas_in_sync == 1
              or not kwargs.pop("experimental_aggregate_gradients", True))


def compress_gradients(optimizer: "tf_keras.optimizers.Optimizer", *,
                       dtype: str = "float16") -> "tf_keras.optimizers.Optimizer":
  """Makes `optimizer` all-reduce gradients in `dtype`; returns the same optimizer.

  Only the cross-replica sum changes, so it matters under strategies that
  all-reduce (mirrored, multi_worker_mirrored); with one replica the cast is
  skipped. Parameter-server training has no all-reduce and is refused. Call it
  inside `strategy.scope()`: the wire scale is a variable per replica.

  Args:
    optimizer: a tf_keras optimizer (not a string: its aggregation is replaced).
    dtype: the wire precision; "float16" (what TF's CPU and GPU collectives
      both reduce).

  Returns:
    `optimizer`, whose `aggregate_gradients` now casts around the all-reduce
    (scaled, see the module doc) and whose `apply_gradients` skips a step whose
    sum is not finite. A `LossScaleOptimizer` (mixed_float16) keeps its own
    skipping; its inner optimizer is the one changed.

  Raises:
    TypeError: `optimizer` is not a tf_keras optimizer (e.g. a string, or a
      Keras 3 optimizer).
    ValueError: `dtype` is not one of `DTYPES`, or the optimizer was created
      under a parameter-server strategy.
    ModuleNotFoundError: tf_keras is not installed (Keras 3 alone), with what to install.
  """
  tf_keras = keras_support.require_tf_keras("compress_gradients")
  if not isinstance(optimizer, tf_keras.optimizers.Optimizer):
    raise TypeError("compress_gradients needs a tf_keras optimizer instance, e.g. "
                    "tfdist.keras.optimizers.SGD(0.1), not a name or a Keras 3 optimizer. "
                    f"Received: {optimizer!r}")
  if dtype not in DTYPES:
    raise ValueError(f"`dtype` must be one of {list(DTYPES)}. Received: dtype={dtype!r}")
  strategy = tf.distribute.get_strategy()
  if isinstance(strategy, tf.distribute.ParameterServerStrategy):
    raise ValueError("Parameter-server training sends gradients to the ps tasks, not "
                     "through an all-reduce; there is nothing to compress. Remove "
                     "compress_gradients. Received: a ParameterServerStrategy scope")
  wire = tf.dtypes.as_dtype(dtype)
  inner = getattr(optimizer, "inner_optimizer", optimizer)  # Under a LossScaleOptimizer.
  aggregate, apply = inner.aggregate_gradients, inner.apply_gradients
  # Per replica and never communicated: every replica updates its own copy from
  # the same all-reduced sums. Sync-on-read, so a read outside a step gives one.
  local = dict(trainable=False, synchronization=tf.VariableSynchronization.ON_READ,
               aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
  with tf.init_scope():
    scale = tf.Variable(INITIAL_WIRE_SCALE, name="wire_scale", **local)
    finite_steps = tf.Variable(0.0, name="wire_finite_steps", **local)

  def aggregate_gradients(grads_and_vars):
    grads_and_vars = list(grads_and_vars)
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
      return aggregate(grads_and_vars)
    # Dense gradients are summed in half precision in one batched all-reduce
    # (the strategy packs them); sparse ones (embeddings) keep their own,
    # cheaper path. The optimizer gets float32 back either way.
    dense = [i for i, (g, _) in enumerate(grads_and_vars)
             if g is not None and not isinstance(g, tf.IndexedSlices)]
    sparse = [i for i, (g, _) in enumerate(grads_and_vars) if isinstance(g, tf.IndexedSlices)]
    out = list(grads_and_vars)
    if dense:
      current = scale.read_value()
      summed = context.all_reduce(
          tf.distribute.ReduceOp.SUM,
          [tf.cast(grads_and_vars[i][0] * tf.cast(current, grads_and_vars[i][0].dtype), wire)
           for i in dense])
      for i, s in zip(dense, summed):
        gradient = grads_and_vars[i][0]
        out[i] = (tf.cast(s, gradient.dtype) / tf.cast(current, gradient.dtype),
                  grads_and_vars[i][1])
      finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(s)) for s in summed])
      grown = finite_steps + 1.0 >= GROWTH_STEPS
      scale.assign(tf.where(finite, tf.where(grown, current * 2.0, current), current / 2.0))
      finite_steps.assign(tf.where(finite & ~grown, finite_steps + 1.0, 0.0))
    if sparse:
      summed = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                  [grads_and_vars[i][0] for i in sparse])
      for i, s in zip(sparse, summed):
        out[i] = (s, grads_and_vars[i][1])
    return out

  def apply_gradients(grads_and_vars, name=None, skip_gradients_aggregation=False, **kwargs):
    if not aggregates_here(skip_gradients_aggregation, kwargs):
      # Aggregated already (a LossScaleOptimizer skips non-finite steps itself), or alone.
      return apply(grads_and_vars, name=name,
                   skip_gradients_aggregation=skip_gradients_aggregation, **kwargs)
    grads_and_vars = [(g, v) for g, v in aggregate_gradients(grads_and_vars) if g is not None]
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(g)))
                            for g, _ in grads_and_vars])
    return _apply_if(finite, apply, inner, grads_and_vars, name)

  inner.aggregate_gradients = aggregate_gradients
  inner.apply_gradients = apply_gradients
  inner.wire_scale = scale  # Read it to see the scale the sums travel at.
  return optimizer


class _Variables:
  """Keeps a strategy from unwrapping mirrored variables passed through `merge_call`."""

  def __init__(self, variables):
    self.variables = variables


def _apply_if(finite, apply, optimizer, grads_and_vars, name):
  """`apply(grads_and_vars)` where `finite`, else only the step count moves on.

  The same branch on every replica. As tf_keras's LossScaleOptimizer does it:
  where the strategy calls `merge_call` to apply (mirrored), the `cond` must be
  taken in cross-replica context, with the apply inside it per replica.
  """
  grads = [g for g, _ in grads_and_vars]
  variables = _Variables([v for _, v in grads_and_vars])
  def skip():  # Branches of a cond return alike: nothing.
    optimizer.iterations.assign_add(1, read_value=False)

  def apply_per_replica(grads, variables):
    apply(list(zip(grads, variables.variables)), name=name, skip_gradients_aggregation=True)

  if tf_internals.strategy_supports_no_merge_call():
    tf_internals.smart_cond(
        finite, lambda: apply_per_replica(grads, variables), skip)
    return optimizer.iterations

  def cross_replica(distribution, finite, grads, variables):
    first = distribution.experimental_local_results(finite)[0]  # The same everywhere.

    def apply_everywhere():
      distribution.extended.call_for_each_replica(apply_per_replica, args=(grads, variables))

    tf_internals.smart_cond(first, apply_everywhere, skip)

  tf.distribute.get_replica_context().merge_call(cross_replica,
                                                 args=(finite, grads, variables))
  return optimizer.iterations
