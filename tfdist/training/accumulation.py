"""Exact gradient accumulation: one update per global batch, computed K micro-batches at a time.

A batch K times larger than memory allows is still one update: each replica
splits its share of the global batch into `steps` micro-batches, runs them one
after the other (each starts when the one before has its gradients, so only
one micro-batch's activations live at once), sums their gradients, and applies the
sum once. Each micro-batch's loss is weighted by its share of the examples of
the whole global batch (every micro-batch of every replica and worker), so
the update is the gradient of one batch K times larger to float rounding,
partial last batches included. Everything Keras does in `apply_gradients`
happens once per update, as it would for the large batch: the all-reduce,
gradient clipping (`clipnorm`, `global_clipnorm`), mixed precision's loss
scale update and skipped steps, the learning-rate schedule and
`optimizer.iterations`. Under ParameterServerStrategy each worker accumulates
its own batch before its one push.

This works under MirroredStrategy where Keras 3's own
`gradient_accumulation_steps` fails (`merge_call called while defining a new
graph`, keras-team/keras#17429): there is no `tf.cond` around the update.

Example:

    >>> with strategy.scope():
    ...   model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    ...   model.compile(optimizer="sgd", loss="mse")
    >>> tfdist.training.accumulate(model, steps=4)   # 4 micro-batches per update
    >>> model.fit(dataset.batch(256), epochs=2)      # updates on 256, 64 at a time

`tfdist.training.loop.Loop(..., accumulate_steps=4)` does the same in the loop.
"""

import types

from tfdist import _keras_support as keras_support

# What `accumulate` sets on the model: its number of micro-batches per update.
STEPS_ATTRIBUTE = "_tfdist_accumulate_steps"


def check_steps(steps) -> int:
  """`steps` if it is an integer >= 1, else a ValueError naming it."""
  if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
    raise ValueError("`accumulate_steps` must be an integer >= 1 (micro-batches per update). "
                     f"Received: accumulate_steps={steps!r}")
  return steps


def accumulate(model, steps: int):
  """Makes `model.fit` compute each batch in `steps` micro-batches and update once.

  Call it after `compile`, for a tf_keras or Keras 3 model, under any strategy
  where its `fit` trains. Batch the data by the global batch of one update
  (K times the micro-batch): each replica's share is split in `steps`
  micro-batches, and the update equals that of the whole batch. Metrics and
  the logged loss are those of the whole batch too. `steps=1` restores
  Keras's own step.

  Args:
    model: a compiled Keras model with Keras's own `train_step`.
    steps: micro-batches per update (an integer >= 1).

  Returns:
    `model`.

  Raises:
    ValueError: `steps` is not an integer >= 1; the model is not compiled.
    TypeError: the model has a `train_step` of its own (accumulate inside it
      with `accumulated_gradients` instead).

  Example:

      >>> model.compile(optimizer="adam", loss="mse")
      >>> tfdist.training.accumulate(model, steps=8).fit(dataset.batch(512))
  """
  check_steps(steps)
  if getattr(model, "optimizer", None) is None:
    raise ValueError("accumulate needs a compiled model: call `model.compile(...)` first. "
                     f"Received: {type(model).__name__} without an optimizer")
  own = vars(model).get("train_step")
  if own is not None and getattr(own, "__func__", None) is not _train_step:
    if steps == 1:
      return model
    raise TypeError(
        "accumulate replaces Keras's own train_step, and this model has its own (or "
        "tfdist's single all-reduce step): accumulate inside yours with "
        "tfdist.training.accumulated_gradients. Received: a model with its own train_step")
  if own is None and not keras_support.has_keras_train_step(model):
    raise TypeError(
        "accumulate replaces Keras's own train_step, and this model has its own: accumulate "
        "inside yours with tfdist.training.accumulated_gradients. Received: "
        f"{type(model).__name__}.train_step")
  if steps == 1:
    if own is not None:
      del model.train_step
  else:
    model.train_step = types.MethodType(_train_step, model)
  setattr(model, STEPS_ATTRIBUTE, steps)
  model.train_function = None  # Traced again, with this step.
  return model


def accumulated_gradients(batch, steps: int, loss_fn, variables, *, has_aux: bool = False):
  """The gradients of a replica's batch, computed in `steps` micro-batches and summed.

  Call it in replica context (inside a step run by `strategy.run`, or a Keras
  `train_step`). `loss_fn(micro_batch, share)` returns the scalar to
  differentiate for one micro-batch, where `share` is that micro-batch's
  examples over the global batch's (all replicas and workers): weight the
  micro-batch's mean loss by it, and the summed gradients are those of the
  global batch's mean loss. Scale the loss for mixed precision inside
  `loss_fn` (and unscale the sum) as for one batch.

  The micro-batches are consecutive slices of near-equal size (empty ones
  when the replica has fewer than `steps` examples: a layer must take an
  empty batch, as for a replica left empty by a partial batch). Each starts
  when the one before has its gradients, so one micro-batch's activations
  live at a time; the step's graph holds `steps` copies of the model (no
  `tf.while_loop`, in which a metric update or an update across replicas
  under central storage cannot run).

  Args:
    batch: a nest of tensors whose first axis is the example (None allowed).
    steps: micro-batches (an integer >= 1).
    loss_fn: `(micro_batch, share) -> scalar tensor`, or with `has_aux`
      `-> (scalar tensor, {name: tensor})`.
    variables: what to differentiate.
    has_aux: `loss_fn` also returns tensors to sum over the micro-batches.

  Returns:
    The summed gradients, a list like `variables` (zeros where a variable has
    none); with `has_aux`, `(gradients, summed aux)`.

  Example:

      >>> def step(batch):
      ...   def loss_fn(micro, share):
      ...     x, y = micro
      ...     return share * tf.reduce_mean(tf.square(model(x, training=True) - y))
      ...   grads = accumulated_gradients(batch, 4, loss_fn, model.trainable_variables)
      ...   optimizer.apply_gradients(zip(grads, model.trainable_variables))
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  check_steps(steps)
  variables = list(variables)
  flat = [t for t in tf.nest.flatten(batch) if t is not None]
  local = tf.shape(flat[0])[0]
  context = tf.distribute.get_replica_context()
  total = tf.cast(local, tf.float32)
  if context is not None and context.num_replicas_in_sync > 1:
    total = context.all_reduce(tf.distribute.ReduceOp.SUM, total)
  summed, after = None, []
  for index in range(steps):
    with tf.control_dependencies(after):  # One micro-batch after the other.
      start, end = (index * local) // steps, ((index + 1) * local) // steps
      micro = tf.nest.map_structure(lambda t: t if t is None else t[start:end], batch)
    share = tf.math.divide_no_nan(tf.cast(end - start, tf.float32), total)
    with tf.GradientTape() as tape:
      loss, aux = loss_fn(micro, share) if has_aux else (loss_fn(micro, share), ())
    grads = [tf.zeros(v.shape, v.dtype) if g is None else tf.cast(g, v.dtype)
             for g, v in zip(tape.gradient(loss, variables), variables)]
    summed = (grads, aux) if summed is None else \
        tf.nest.map_structure(tf.add, summed, (grads, aux))
    after = summed[0]
  return summed if has_aux else summed[0]


def _train_step(self, data):
  """Keras's `train_step` (either Keras), the batch computed in micro-batches."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  keras3 = keras_support.is_keras3_model(self)
  if keras3:
    import keras  # pylint: disable=g-import-not-at-top
    unpack = keras.utils.unpack_x_y_sample_weight
  else:
    import tf_keras  # pylint: disable=g-import-not-at-top
    unpack = tf_keras.utils.unpack_x_y_sample_weight
  optimizer = self.optimizer
  replicas = tf.distribute.get_strategy().num_replicas_in_sync
  # Keras 3's loss tracker is the metric named "loss" (tf_keras's compute_loss updates its own).
  tracker = next((m for m in self.metrics if m.name == "loss"), None) if keras3 else None

  def loss_fn(micro, share):
    x, y, sample_weight = unpack(micro)
    y_pred = self(x, training=True)
    # Keras's loss: the micro-batch's mean, divided by the replicas (both Kerases).
    loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight)
    if tracker is not None:
      examples = tf.shape(tf.nest.flatten(x)[0])[0]
      tracker.update_state(loss * replicas, sample_weight=examples)
    if keras3:
      self.compute_metrics(x, y, y_pred, sample_weight)
    else:  # tf_keras's compute_metrics also reads the results: a merge_call in the loop.
      self.compiled_metrics.update_state(y, y_pred, sample_weight)
    loss = loss * tf.cast(share * replicas, loss.dtype)
    if hasattr(optimizer, "get_scaled_loss"):  # tf_keras's LossScaleOptimizer.
      loss = optimizer.get_scaled_loss(loss)
    elif keras3:  # Identity, except Keras 3's LossScaleOptimizer (apply unscales).
      loss = optimizer.scale_loss(loss)
    return loss

  variables = self.trainable_variables
  grads = accumulated_gradients(data, getattr(self, STEPS_ATTRIBUTE), loss_fn, variables)
  if hasattr(optimizer, "get_unscaled_gradients"):
    grads = optimizer.get_unscaled_gradients(grads)
  apply_gradients(optimizer, grads, variables)
  return self.get_metrics_result()


def apply_gradients(optimizer, grads, variables) -> None:
  """`optimizer.apply_gradients`, clipping the sum over replicas as one device would.

  Call it in replica context with the replica's gradients (after
  `get_unscaled_gradients` for tf_keras's loss scaling; still scaled for Keras
  3's, whose `apply_gradients` unscales). Keras 3 clips each replica's
  gradient before its all-reduce (tf_keras after), so its own step clips
  another gradient than one device does; here, under a Keras 3 optimizer that
  clips and several replicas, the summed gradient is clipped as one device
  would clip it, and each replica hands on 1/R of it, which Keras's clipping
  then leaves as it is and its all-reduce sums back.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  replicas = tf.distribute.get_strategy().num_replicas_in_sync
  clips = [n for n in _CLIPS if getattr(inner, n, None)] \
      if keras_support.is_keras3_model(optimizer) and replicas > 1 else []
  if not clips:
    optimizer.apply_gradients(zip(grads, variables))
    return
  context = tf.distribute.get_replica_context()
  grads = context.all_reduce(tf.distribute.ReduceOp.SUM, list(grads))
  scale = getattr(optimizer, "dynamic_scale", None)  # Keras 3's LossScaleOptimizer.
  if scale is not None:
    grads = [g / tf.cast(scale, g.dtype) for g in grads]
  grads = _clipped(grads, clips[0], getattr(inner, clips[0]))
  if scale is not None:
    grads = [g * tf.cast(scale, g.dtype) for g in grads]
  optimizer.apply_gradients(zip([g / replicas for g in grads], variables))


# Keras 3 optimizers' clipping bounds (one is set at most).
_CLIPS = ("clipnorm", "global_clipnorm", "clipvalue")


def _clipped(grads, kind, bound):
  """`grads` clipped as a Keras 3 optimizer with `kind=bound` clips them."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if kind == "clipnorm":
    return [tf.clip_by_norm(g, bound) for g in grads]
  if kind == "global_clipnorm":
    return tf.clip_by_global_norm(grads, bound)[0]
  return [tf.clip_by_value(g, -bound, bound) for g in grads]
