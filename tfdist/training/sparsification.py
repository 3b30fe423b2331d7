"""Gradients exchanged below 16 bits: top-k sparsification or 8-bit quantization, with error feedback.

float16 compression (`tfdist.training.compression`) halves the bytes of the
all-reduce. Going further loses more of each gradient, so what one step does
not send is kept and added to the next step's gradient (error feedback), and
nothing is lost, only delayed:

- "top_k": each replica sends the `fraction` of its gradient's entries largest
  in magnitude, as (int32 index, float32 value) pairs, 8 bytes each; the rest
  stays in its residual.
- "int8": each replica sends every entry in 8 bits, scaled by its largest
  magnitude (one float32 per tensor); the rounding error stays in its residual.

Sparse or quantized values cannot be summed by an all-reduce as they travel
(different indices per replica; int8 sums overflow), so each replica
all-gathers the others' and sums them in float32: every replica gets the same
sum. Per replica, on the wire: `wire_bytes`.

Example:

    >>> with strategy.scope():
    ...   model = make_model()
    ...   optimizer = sparsify_gradients(keras.optimizers.SGD(0.1), model.trainable_variables,
    ...                                  method="top_k", fraction=0.01)
    ...   model.compile(optimizer=optimizer, loss=...)
"""

from typing import Sequence

import numpy as np
import tensorflow as tf

from tfdist import _keras_support as keras_support
from tfdist.training import compression

# Keras 3 alone: importing this module names what to install.
tf_keras = keras_support.require_tf_keras(__name__)

METHODS = ("top_k", "int8")


def wire_bytes(variables: Sequence[tf.Variable], *, method: str, fraction: float = 0.01) -> int:
  """Bytes one replica sends per step for `variables`' gradients, before the all-gather.

  >>> wire_bytes([tf.Variable(tf.zeros((1000,)))], method="top_k", fraction=0.01)
  80
  """
  _check(method, fraction)
  sizes = [int(np.prod(v.shape)) for v in variables]
  if method == "top_k":
    return sum(8 * _k(size, fraction) for size in sizes)
  return sum(size + 4 for size in sizes)


def sparsify_gradients(optimizer: tf_keras.optimizers.Optimizer,
                       variables: Sequence[tf.Variable], *, method: str = "top_k",
                       fraction: float = 0.01) -> tf_keras.optimizers.Optimizer:
  """Makes `optimizer` exchange `variables`' gradients by `method`; returns the same optimizer.

  Call it inside `strategy.scope()` with the model built: each replica keeps a
  residual per variable (what it has not sent yet). With one replica nothing is
  exchanged and the gradients are applied as they are.

  Args:
    optimizer: a tf_keras optimizer instance.
    variables: the variables it will update, e.g. `model.trainable_variables`.
    method: "top_k" (the largest `fraction` of the entries) or "int8".
    fraction: for "top_k", the share of each gradient's entries sent, in (0, 1].

  Returns:
    `optimizer`, whose `apply_gradients` now exchanges the gradients itself.

  Raises:
    TypeError: `optimizer` is not a tf_keras optimizer.
    ValueError: a bad `method` or `fraction`, or a parameter-server strategy
      (its gradients go to the ps tasks, with no all-reduce to replace).
  """
  if not isinstance(optimizer, tf_keras.optimizers.Optimizer):
    raise TypeError("sparsify_gradients needs a tf_keras optimizer instance, e.g. "
                    f"tfdist.keras.optimizers.SGD(0.1). Received: {optimizer!r}")
  _check(method, fraction)
  if isinstance(tf.distribute.get_strategy(), tf.distribute.ParameterServerStrategy):
    raise ValueError("Parameter-server training sends gradients to the ps tasks, not "
                     "through an all-reduce; there is nothing to sparsify. Remove "
                     "sparsify_gradients. Received: a ParameterServerStrategy scope")
  # Per replica and never communicated: each replica's own unsent remainder.
  local = dict(trainable=False, synchronization=tf.VariableSynchronization.ON_READ,
               aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
  with tf.init_scope():
    residuals = {id(v): tf.Variable(tf.zeros(v.shape, v.dtype), name="residual", **local)
                 for v in variables}
  apply = optimizer.apply_gradients

  def apply_gradients(grads_and_vars, name=None, skip_gradients_aggregation=False, **kwargs):
    if not compression.aggregates_here(skip_gradients_aggregation, kwargs):
      return apply(grads_and_vars, name=name,
                   skip_gradients_aggregation=skip_gradients_aggregation, **kwargs)
    context = tf.distribute.get_replica_context()
    exchanged = []
    for gradient, variable in grads_and_vars:
      if gradient is None:
        continue
      residual = residuals.get(id(variable))
      if residual is None:
        raise ValueError(f"sparsify_gradients was given no residual for `{variable.name}`: "
                         "pass every variable the optimizer updates. Received: a gradient "
                         f"for {variable.name}")
      exchanged.append((_exchange(context, tf.convert_to_tensor(gradient), residual, method,
                                  fraction), variable))
    return apply(exchanged, name=name, skip_gradients_aggregation=True, **kwargs)

  optimizer.apply_gradients = apply_gradients
  optimizer.residuals = list(residuals.values())  # Read them to see what is still unsent.
  return optimizer


def _exchange(context, gradient, residual, method, fraction):
  """This replica's gradient, sent by `method` with error feedback; the sum over replicas."""
  shape = gradient.shape
  flat = tf.reshape(gradient + residual, [-1])
  if method == "top_k":
    k = _k(int(flat.shape[0]), fraction)
    _, indices = tf.math.top_k(tf.abs(flat), k=k, sorted=False)
    values = tf.gather(flat, indices)
    sent = tf.scatter_nd(indices[:, None], values, tf.shape(flat))
    every_index = context.all_gather(indices, axis=0)
    every_value = context.all_gather(values, axis=0)
    # scatter_nd adds the values of an index that several replicas sent.
    total = tf.scatter_nd(every_index[:, None], every_value, tf.shape(flat))
  else:
    scale = tf.maximum(tf.reduce_max(tf.abs(flat)), np.finfo(np.float32).tiny) / 127.0
    quantized = tf.cast(tf.round(flat / scale), tf.int8)
    sent = tf.cast(quantized, flat.dtype) * scale
    every_quantized = context.all_gather(quantized[None], axis=0)
    every_scale = context.all_gather(scale[None], axis=0)
    total = tf.reduce_sum(tf.cast(every_quantized, flat.dtype) * every_scale[:, None], axis=0)
  residual.assign(tf.reshape(flat - sent, shape))
  return tf.reshape(total, shape)


def _k(size: int, fraction: float) -> int:
  return max(1, int(round(size * fraction)))


def _check(method, fraction):
  if method not in METHODS:
    raise ValueError(f"`method` must be one of {list(METHODS)}. Received: method={method!r}")
  if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) \
      or not 0 < fraction <= 1:
    raise ValueError(f"`fraction` must be a number in (0, 1]. Received: fraction={fraction!r}")
