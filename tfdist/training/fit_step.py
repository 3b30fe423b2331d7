"""A tf_keras `fit` step that synchronises once: gradients and metrics in one all-reduce.

Under MultiWorkerMirroredStrategy every cross-worker reduction in a step is a
collective, and each is a network round trip. tf_keras's own step runs one
for the gradients, then one per metric variable when it reads the metrics'
results (a `Mean` has a total and a count: the default job's loss and
accuracy are four more), each waiting for the one before. This step updates
the metrics first, then all-reduces the gradients and the metrics' local
totals and counts in one call, which TF packs into one collective
(`tfdist._lab.collectives` counts 1 instead of 5 for the default job), and
computes the logs from the summed totals: the same values Keras logs, the
same weights.

`synchronise_once(model, strategy)` installs it on a compiled tf_keras model
where it applies, and says why not where it does not: Keras 3 (its own
trainer), a model with its own `train_step`, an optimizer that aggregates
its own way (`compress_gradients`, a `LossScaleOptimizer`), or a strategy
other than multi-worker MultiWorkerMirrored. Metrics that are not a plain
`Mean` or `Sum` (AUC, precision, ...) are still read Keras's way, with their
own all-reduces.

Example:

    >>> with strategy.scope():
    ...   model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    >>> synchronise_once(model, strategy)
    'one all-reduce per step'
    >>> model.fit(dataset, epochs=3)
"""

import types

from tfdist import _keras_support as keras_support

INSTALLED = "one all-reduce per step"
_NOT_TF_KERAS = "Keras's own step kept: not a tf_keras model (Keras 3 has its own trainer)"


def synchronise_once(model, strategy) -> str:
  """Makes `model`'s `fit` step all-reduce once under multi-worker MWMS.

  Call it after `compile`. For a tf_keras model it also sets the
  `distribute_reduction_method` to "first" where that applies
  (`keras_support.set_distribute_reduction_method`), whether or not the step
  is replaced: either way every replica's logs are the global values.

  Returns:
    `INSTALLED`, or why Keras's own step was kept.
  """
  tf_keras = keras_support.optional_tf_keras()  # Here, not at the top: no Keras on import.
  if tf_keras is None:  # Keras 3 alone.
    return _NOT_TF_KERAS
  if getattr(vars(model).get("train_step"), "__func__", None) is _train_step:
    return INSTALLED  # Already.
  if isinstance(model, tf_keras.Model):
    keras_support.set_distribute_reduction_method(model, strategy)
  reason = _reason_not(model, strategy, tf_keras)
  if reason:
    return reason
  model.train_step = types.MethodType(_train_step, model)
  model.train_function = None  # Traced again, with this step.
  return INSTALLED


def _reason_not(model, strategy, tf_keras) -> str:
  if not isinstance(model, tf_keras.Model):
    return _NOT_TF_KERAS
  if type(model).train_step is not tf_keras.Model.train_step or \
      "train_step" in vars(model):
    return "Keras's own step kept: the model has its own train_step"
  optimizer = getattr(model, "optimizer", None)
  if type(optimizer) not in vars(tf_keras.optimizers).values() or \
      not isinstance(optimizer, tf_keras.optimizers.Optimizer):
    return ("Keras's own step kept: the optimizer is not one of tf_keras's own "
            f"({type(optimizer).__name__})")
  if "aggregate_gradients" in vars(optimizer) or "apply_gradients" in vars(optimizer):
    return "Keras's own step kept: the optimizer aggregates its own way (compress_gradients)"
  if not keras_support.is_multi_worker_mirrored(strategy):
    return "Keras's own step kept: not multi-worker MultiWorkerMirroredStrategy"
  return ""


def _packable(metric, tf_keras) -> bool:
  """A metric whose result is its summed total, or total over count."""
  for cls in (tf_keras.metrics.Mean, tf_keras.metrics.Sum):
    if isinstance(metric, cls) and type(metric).result is cls.result:
      return True
  return False


def _train_step(self, data):
  """tf_keras's `Model.train_step`, with one all-reduce for gradients and metrics."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  x, y, sample_weight = tf_keras.utils.unpack_x_y_sample_weight(data)
  with tf.GradientTape() as tape:
    y_pred = self(x, training=True)
    loss = self.compute_loss(x, y, y_pred, sample_weight)
  self._validate_target_and_loss(y, loss)  # pylint: disable=protected-access
  variables = self.trainable_variables
  pairs = [(g, v) for g, v in zip(tape.gradient(loss, variables), variables) if g is not None]
  # Keras updates the metrics after the update; before it, their totals can
  # ride in the gradients' all-reduce. The values are the same: y_pred and the
  # loss come from the weights before the update either way.
  self.compiled_metrics.update_state(y, y_pred, sample_weight)
  packed = [m for m in self.metrics if _packable(m, tf_keras)]
  packed_ids = {id(m) for m in packed}
  # In a replica, a sync-on-read metric variable reads its local value.
  local = [v.read_value() for m in packed for v in m.variables]
  summed = tf.distribute.get_replica_context().all_reduce(
      tf.distribute.ReduceOp.SUM, [g for g, _ in pairs] + local)
  self.optimizer.apply_gradients(zip(summed[:len(pairs)], [v for _, v in pairs]),
                                 skip_gradients_aggregation=True)
  totals = iter(summed[len(pairs):])
  logs = {}
  for metric in self.metrics:
    if id(metric) in packed_ids:
      if isinstance(metric, tf_keras.metrics.Sum):
        logs[metric.name] = next(totals)
      else:  # Mean: variables are (total, count).
        total, count = next(totals), next(totals)
        logs[metric.name] = tf.math.divide_no_nan(total, count)
    else:
      result = metric.result()  # Keras's way, with its own all-reduces.
      logs.update(result if isinstance(result, dict) else {metric.name: result})
  return logs
