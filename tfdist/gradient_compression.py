"""All-reduce gradients in half precision: half the bytes on the wire.

Data-parallel training sums every gradient across replicas each step. When
the all-reduce, not the compute, sets the step time (large gradients, small
per-replica batches, slow networks), sending float16 instead of float32 halves
the bytes. The optimizer still applies float32 gradients to float32 variables;
only the sum travels in half precision.

The price: float16 keeps 11 bits of mantissa (about 3 decimal digits) and
overflows above 65504. Gradients of a normally scaled loss are far inside that
range; the rounding error averages out like SGD noise. The user opts in.

Example:

>>> with strategy.scope():
...   model = make_model()
...   model.compile(optimizer=compress_gradients(keras.optimizers.SGD(0.1)), loss=...)
"""

import tensorflow as tf
import tf_keras

DTYPES = ("float16",)


def compress_gradients(optimizer: tf_keras.optimizers.Optimizer, *,
                       dtype: str = "float16") -> tf_keras.optimizers.Optimizer:
  """Makes `optimizer` all-reduce gradients in `dtype`; returns the same optimizer.

  Only the cross-replica sum changes, so it matters under strategies that
  all-reduce (mirrored, multi_worker_mirrored); with one replica the cast is
  skipped. Parameter-server training has no all-reduce and is refused.

  Args:
    optimizer: a tf_keras optimizer (not a string: its aggregation is replaced).
    dtype: the wire precision; "float16" (what TF's CPU and GPU collectives
      both reduce).

  Returns:
    `optimizer`, whose `aggregate_gradients` now casts around the all-reduce.

  Raises:
    TypeError: `optimizer` is not a tf_keras optimizer (e.g. a string, or a
      Keras 3 optimizer).
    ValueError: `dtype` is not one of `DTYPES`, or the optimizer was created
      under a parameter-server strategy.
  """
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
  aggregate = optimizer.aggregate_gradients

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
      summed = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                  [tf.cast(grads_and_vars[i][0], wire) for i in dense])
      for i, s in zip(dense, summed):
        out[i] = (tf.cast(s, grads_and_vars[i][0].dtype), grads_and_vars[i][1])
    if sparse:
      summed = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                  [grads_and_vars[i][0] for i in sparse])
      for i, s in zip(sparse, summed):
        out[i] = (s, grads_and_vars[i][1])
    return out

  optimizer.aggregate_gradients = aggregate_gradients
  return optimizer

