"""A custom training loop for every strategy and both Kerases, without the usual traps.

TensorFlow's "Custom training with tf.distribute" guide leaves the user to get
right, every time: the loss averaged over the *global* batch (not per replica),
regularization scaled by the number of replicas, the partial last batch,
metrics summed over every replica and worker (not read on one), several steps
per `tf.function`, ParameterServerStrategy's `ClusterCoordinator`, and a
checkpoint written once. `Loop` does them, modelled on Model Garden's orbit
(`StandardTrainer`: an inner loop of steps in one function) and Lightning
Fabric (the user's step stays plain).

Example:

>>> loop = tfdist.loop.Loop(strategy, model, loss=keras.losses.MeanSquaredError(),
...                         optimizer=keras.optimizers.SGD(0.1), steps_per_loop=10)
>>> history = loop.fit(dataset, epochs=3)          # {"loss": [...], "examples": [...]}
>>> loop.evaluate(test_dataset)                    # {"loss": ..., "examples": 1001.0}

Or a step of your own, per replica, returning sums over its examples:

>>> def step(batch):
...   x, y = batch
...   with tf.GradientTape() as tape:
...     per_example = loss_fn(y, model(x, training=True))
...     loss = tfdist.loop.average_loss(per_example, model.losses)
...   grads = tape.gradient(loss, model.trainable_variables)
...   optimizer.apply_gradients(zip(grads, model.trainable_variables))
...   return {"loss": tf.reduce_sum(per_example)}
>>> loop = tfdist.loop.Loop(strategy, model, optimizer=optimizer, step_fn=step)

What a step returns is summed over replicas, workers and steps, and reported
divided by the number of examples, which the loop counts itself: every example
once, the partial last batch included (`get_next_as_optional`). Under
synchronous strategies the sums live in sync-on-read variables, so they cross
workers once per log, not once per step.

Under ParameterServerStrategy, `fit` takes a `dataset_fn(input_context)` and
`steps_per_epoch`, as Keras does; steps run on the workers through the
strategy's `ClusterCoordinator`, which re-runs a step whose worker was lost.
Keras 3 trains there too: its variables' `assign_add` is made the atomic TF op
(`keras3_workarounds.atomic_assign_add`), else concurrent workers lose updates.
Keras 3 variables sharded over the ps tasks (`num_ps_shards > 1`) train too:
the gradients and updates go to the shards (`Loop.trainable_variables`, as
tf_keras lists sharded variables), and checkpoints save each variable whole
(`keras3_workarounds.sharded_checkpoints`). A `step_fn` of your own must
differentiate `loop.trainable_variables`, not the model's.
"""

import os
from typing import Callable, Dict, Mapping, Optional, Sequence

import tensorflow as tf

from tfdist import checkpointing
from tfdist import keras3_workarounds
from tfdist import keras_support

EXAMPLES = "examples"
# Closures of an exact evaluation under parameter servers: several per worker,
# so a slow or lost worker holds up only a small share.
EVALUATION_SHARDS = 8
StepFn = Callable[..., Mapping[str, tf.Tensor]]


def average_loss(per_example_loss, regularization_losses: Sequence = ()) -> tf.Tensor:
  """The replica's share of the global batch's mean loss, plus scaled regularization.

  Call it in replica context (inside a step). The global batch size is the sum
  of every replica's batch, so a partial last batch (even an empty replica) is
  averaged right; `tf.nn.compute_average_loss` alone assumes full batches.
  Regularization losses are divided by the number of replicas
  (`tf.nn.scale_regularization_loss`): the replicas' gradients are summed.
  """
  per_example_loss = tf.convert_to_tensor(per_example_loss)
  local = tf.shape(per_example_loss)[0]
  context = tf.distribute.get_replica_context()
  if context is not None and context.num_replicas_in_sync > 1:
    global_batch = tf.cast(context.all_reduce(
        tf.distribute.ReduceOp.SUM, tf.cast(local, tf.float32)), tf.int32)
  else:
    global_batch = local
  loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch)
  if regularization_losses:
    loss += tf.nn.scale_regularization_loss(tf.add_n(list(regularization_losses)))
  return loss


def _per_example(loss, y, y_pred):
  # In float32, as Keras computes losses: a float16 loss, scaled for mixed
  # precision, overflows.
  y_pred = tf.nest.map_structure(
      lambda t: tf.cast(t, tf.float32) if t.dtype in (tf.float16, tf.bfloat16) else t, y_pred)
  # A Keras `Loss` object's `call` is its per-example form, in both Kerases.
  values = loss.call(y, y_pred) if hasattr(loss, "call") else loss(y, y_pred)
  values = tf.convert_to_tensor(values)
  if values.shape.rank == 0:
    raise ValueError(
        "`loss` must give one value per example (a Keras loss object, or a function "
        "such as keras.losses.mean_squared_error), not their mean: the loop averages "
        f"over the global batch itself. Received: a scalar from {loss!r}")
  # Further axes (e.g. time steps) are averaged, as Keras's default reduction does.
  return tf.reduce_mean(values, axis=list(range(1, values.shape.rank))) \
      if values.shape.rank > 1 else values


def _batch_size(batch) -> tf.Tensor:
  return tf.shape(tf.nest.flatten(batch)[0])[0]


class Loop:
  """Trains and evaluates `model` under `strategy` with a loop of its own.

  Args:
    strategy: any tf.distribute strategy (tfdist's or TensorFlow's).
    model: a built Keras model, either Keras, created under `strategy.scope()`.
    loss: a Keras loss (object or function) for the default step.
    optimizer: a Keras optimizer; built here under the scope.
    metrics: name -> fn(y_true, y_pred) giving one value per example (e.g.
      `keras.metrics.sparse_categorical_accuracy`), reported as means.
    step_fn: your own per-replica `step(batch) -> {name: sum over its examples}`
      instead of the default step (then `loss` is not used); it differentiates
      and updates `loop.trainable_variables`.
    steps_per_loop: steps run inside one `tf.function` call.
    checkpoint_dir: where a `tf.train.CheckpointManager` keeps the model,
      optimizer and step, written by the chief only; `fit` resumes from it.
    checkpoint_every: also save every this many steps (at loop ends); None:
      at epoch ends only. Under parameter servers, saves are at epoch ends.
  """

  def __init__(self, strategy: tf.distribute.Strategy, model, *, loss=None, optimizer=None,
               metrics: Optional[Mapping[str, Callable]] = None,
               step_fn: Optional[StepFn] = None, steps_per_loop: int = 1,
               checkpoint_dir: Optional[str] = None, checkpoint_every: Optional[int] = None):
    if step_fn is None and (loss is None or optimizer is None):
      raise ValueError("Loop needs `loss` and `optimizer` for its default step, or a "
                       f"`step_fn`. Received: loss={loss!r}, optimizer={optimizer!r}")
    for field, value in (("steps_per_loop", steps_per_loop),
                         ("checkpoint_every", checkpoint_every)):
      if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                or value < 1):
        raise ValueError(f"`{field}` must be an integer >= 1. Received: {field}={value!r}")
    if not getattr(model, "built", True) or not model.trainable_variables:
      raise ValueError("Loop needs a built model: give it an Input layer, or call it on a "
                       f"batch first. Received: an unbuilt {type(model).__name__}")
    self.strategy, self.model, self.loss, self.optimizer = strategy, model, loss, optimizer
    self.metrics = dict(metrics or {})
    self.steps_per_loop = steps_per_loop
    self._pss = isinstance(strategy, tf.distribute.ParameterServerStrategy)
    self._keras3 = keras_support.is_keras3_model(model)
    if self._pss and self._keras3:
      keras3_workarounds.atomic_assign_add()
      keras3_workarounds.sharded_checkpoints()
    with strategy.scope():
      if optimizer is not None and hasattr(optimizer, "build"):
        optimizer.build(self.trainable_variables)  # Slots on the right devices.
      self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="loop_step")
      self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="loop_epoch")
    self._step_fn = step_fn or self._default_step
    # kind ("train", "evaluate") -> name -> sync-on-read variable.
    self._sums: Dict[str, Dict[str, tf.Variable]] = {"train": {}, "evaluate": {}}
    self._functions = {}  # kind -> its tf.function
    self._per_worker_datasets = {}  # dataset_fn -> its per-worker dataset (PSS)
    self._manager = None
    self._checkpoint_every = checkpoint_every
    if checkpoint_dir is not None:
      self._checkpoint_dir = checkpoint_dir
      tracked = {"model": model, "step": self.step, "epoch": self.epoch}
      if optimizer is not None:
        tracked["optimizer"] = optimizer
      self._checkpoint = tf.train.Checkpoint(**tracked)
      self._manager = tf.train.CheckpointManager(self._checkpoint, checkpoint_dir, max_to_keep=1)
      if self._manager.latest_checkpoint:
        self._checkpoint.restore(self._manager.latest_checkpoint).expect_partial()

  @property
  def trainable_variables(self) -> list:
    """The variables a step differentiates and updates.

    The model's, except that a Keras 3 variable sharded over parameter servers
    is listed as its shards (tf_keras lists them so itself): TF's gradient tape
    and Keras 3's optimizer handle a shard, not a Keras variable wrapping a
    `ShardedVariable`. Optimizer slots are then made per shard, on its ps task.
    """
    if not self._keras3:
      return self.model.trainable_variables
    sharded = tf.__internal__.distribute.ShardedVariable
    return [shard for v in self.model.trainable_variables
            for shard in (v.value.variables if isinstance(v.value, sharded) else [v])]

  # --- the steps -------------------------------------------------------------

  def _default_step(self, batch):
    x, y = batch[0], batch[1]
    model = self.model
    with tf.GradientTape() as tape:
      y_pred = model(x, training=True)
      per_example = _per_example(self.loss, y, y_pred)
      loss = average_loss(per_example, model.losses)
      # Under mixed_float16 compile's LossScaleOptimizer scales the loss (each Keras its way).
      if hasattr(self.optimizer, "get_scaled_loss"):  # tf_keras
        loss = self.optimizer.get_scaled_loss(loss)
      elif hasattr(self.optimizer, "scale_loss"):  # Keras 3; apply_gradients unscales.
        loss = self.optimizer.scale_loss(loss)
    variables = self.trainable_variables
    grads = tape.gradient(loss, variables)
    if hasattr(self.optimizer, "get_unscaled_gradients"):
      grads = self.optimizer.get_unscaled_gradients(grads)
    self.optimizer.apply_gradients(zip(grads, variables))
    return self._sums_of(per_example, y, y_pred)

  def _eval_step(self, batch):
    x, y = batch[0], batch[1]
    y_pred = self.model(x, training=False)
    return self._sums_of(_per_example(self.loss, y, y_pred), y, y_pred)

  def _sums_of(self, per_example, y, y_pred):
    sums = {"loss": tf.reduce_sum(per_example)}
    if self.model.losses:  # Reported as fit reports it: data loss plus regularization.
      sums["loss"] += tf.add_n(self.model.losses) * tf.cast(tf.shape(per_example)[0],
                                                            per_example.dtype)
    for name, fn in self.metrics.items():
      sums[name] = tf.reduce_sum(tf.cast(fn(y, y_pred), tf.float32))
    return sums

  def _counted(self, step_fn):
    def step(batch):
      sums = dict(step_fn(batch))
      sums[EXAMPLES] = _batch_size(batch)
      return {k: tf.cast(v, tf.float32) for k, v in sums.items()}
    return step

  # --- synchronous strategies: sums in sync-on-read variables ----------------

  def _make_sync_function(self, kind, step_fn):
    counted = self._counted(step_fn)
    variables = self._sums[kind]

    def replica_step(batch):
      sums = counted(batch)
      for name, value in sums.items():
        variables[name].assign_add(value)

    @tf.function
    def run(iterator, steps):
      ran = tf.constant(0, tf.int64)
      for _ in tf.range(steps):
        optional = iterator.get_next_as_optional()
        if not optional.has_value():
          break
        self.strategy.run(replica_step, args=(optional.get_value(),))
        ran += 1
      return ran

    return run

  def _ensure_sums(self, kind, names):
    with self.strategy.scope():
      for name in names:
        if name not in self._sums[kind]:
          self._sums[kind][name] = tf.Variable(
              0.0, trainable=False, name=f"loop_sum_{name}",
              synchronization=tf.VariableSynchronization.ON_READ,
              aggregation=tf.VariableAggregation.SUM)

  def _sync_run(self, kind, step_fn, iterator, steps):
    function = self._functions.get(kind)
    if function is None:
      # The step's names, from a trace that runs nothing: the sums' variables
      # must exist before the function that adds to them is traced.
      counted = self._counted(step_fn)
      probe = tf.function(lambda it: self.strategy.run(counted, args=(next(it),)))
      self._ensure_sums(kind, sorted(probe.get_concrete_function(iterator).structured_outputs))
      function = self._functions[kind] = self._make_sync_function(kind, step_fn)
    return int(function(iterator, tf.constant(steps, tf.int64)))

  def _read_sums(self, kind) -> Dict[str, float]:
    # Reading a sync-on-read variable sums it over every replica and worker.
    return {name: float(v.read_value()) for name, v in sorted(self._sums[kind].items())}

  def _reset_sums(self, kind):
    for v in self._sums[kind].values():
      v.assign(0.0)

  # --- parameter servers: steps scheduled on workers, sums fetched ----------

  def _pss_function(self, kind, step_fn):
    function = self._functions.get(kind)
    if function is None:
      counted = self._counted(step_fn)

      @tf.function
      def run(iterator):
        totals = None
        for _ in range(self.steps_per_loop):  # Unrolled: one closure, k steps.
          sums = self.strategy.run(counted, args=(next(iterator),))
          totals = sums if totals is None else {k: totals[k] + sums[k] for k in sums}
        return totals

      function = self._functions[kind] = run
    return function

  def _pss_epoch(self, kind, step_fn, dataset_fn, steps):
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(self.strategy)
    if dataset_fn not in self._per_worker_datasets:
      # TF's parameter-server guide: each worker builds its own distributed dataset.
      self._per_worker_datasets[dataset_fn] = coordinator.create_per_worker_dataset(
          tf.function(lambda: self.strategy.distribute_datasets_from_function(dataset_fn)))
    iterator = iter(self._per_worker_datasets[dataset_fn])
    function = self._pss_function(kind, step_fn)
    results = [coordinator.schedule(function, args=(iterator,))
               for _ in range(steps // self.steps_per_loop)]  # fit checks it divides.
    coordinator.join()
    totals: Dict[str, float] = {}
    for result in results:
      for name, value in result.fetch().items():
        totals[name] = totals.get(name, 0.0) + float(value)
    return totals

  def _pss_exact_evaluate(self, dataset_fn) -> Dict[str, float]:
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(self.strategy)
    shards = EVALUATION_SHARDS
    context = tf.distribute.InputContext()  # The whole dataset; sharded below by batch.
    counted = self._counted(self._eval_step)
    spec = dataset_fn(context).element_spec  # Built, never read, here.
    if int(dataset_fn(context).cardinality()) == tf.data.INFINITE_CARDINALITY:
      raise ValueError("Exact evaluation reads the dataset to its end: give a finite one "
                       "(no `repeat()`), or `steps`. Received: an infinite dataset")
    names = sorted(tf.function(counted).get_concrete_function(spec).structured_outputs)

    @tf.function
    def run(index):
      totals = {name: tf.constant(0.0) for name in names}
      for batch in dataset_fn(context).shard(shards, index):  # Read on the worker.
        sums = self.strategy.run(counted, args=(batch,))
        totals = {name: totals[name] + sums[name] for name in names}
      return totals

    results = [coordinator.schedule(run, args=(tf.constant(i, tf.int64),))
               for i in range(shards)]
    coordinator.join()
    totals = {name: 0.0 for name in names}
    for result in results:
      for name, value in result.fetch().items():
        totals[name] += float(value)
    return totals

  # --- the public loop -------------------------------------------------------

  def _distribute(self, dataset):
    if isinstance(dataset, tf.distribute.DistributedDataset):
      return dataset
    if callable(dataset) and not isinstance(dataset, tf.data.Dataset):
      return self.strategy.distribute_datasets_from_function(dataset)
    return self.strategy.experimental_distribute_dataset(dataset)

  def fit(self, dataset, *, epochs: int = 1, steps_per_epoch: Optional[int] = None,
          verbose: bool = True) -> Dict[str, list]:
    """Trains for `epochs`, from where the checkpoint left off; returns the epoch logs.

    `dataset`: a `tf.data.Dataset` batched by the global batch size, or a
    `dataset_fn(input_context)` batched per replica (required under parameter
    servers). Without `steps_per_epoch` an epoch is one pass over the data.
    """
    if self._pss and (steps_per_epoch is None or not callable(dataset)):
      raise ValueError(
          "Under ParameterServerStrategy, fit needs `dataset` as a "
          "dataset_fn(input_context) (each worker builds its own) and `steps_per_epoch`. "
          f"Received: dataset={type(dataset).__name__}, steps_per_epoch={steps_per_epoch!r}")
    if self._pss and steps_per_epoch % self.steps_per_loop:
      raise ValueError(
          "Under ParameterServerStrategy, `steps_per_epoch` must be a multiple of "
          f"`steps_per_loop`. Received: steps_per_epoch={steps_per_epoch}, "
          f"steps_per_loop={self.steps_per_loop}")
    history: Dict[str, list] = {}
    # With steps_per_epoch, one iterator runs on across epochs, as in Keras;
    # without, every epoch is a new pass. A resumed fit starts a new iterator.
    distributed = None if self._pss else self._distribute(dataset)
    iterator = None if self._pss else iter(distributed)
    for epoch in range(int(self.epoch.numpy()), epochs):
      steps = steps_per_epoch
      if steps_per_epoch is not None:  # Resumed mid-epoch: only the steps left.
        done = int(self.step.numpy()) - epoch * steps_per_epoch
        steps -= done if 0 < done < steps_per_epoch else 0
      if self._pss:
        steps -= steps % self.steps_per_loop  # Closures run whole loops.
        totals = self._pss_epoch("train", self._step_fn, dataset, steps)
        self.step.assign_add(steps)
      else:
        totals = self._sync_epoch("train", self._step_fn, iterator, steps)
        if steps_per_epoch is None and epoch + 1 < epochs:
          iterator = iter(distributed)  # The next pass.
      self.epoch.assign(epoch + 1)
      logs = self._logs(totals)
      for name, value in logs.items():
        history.setdefault(name, []).append(value)
      self._save()
      if verbose:
        shown = " - ".join(f"{k}: {v:.6g}" for k, v in logs.items())
        print(f"Epoch {epoch + 1}/{epochs} - step {int(self.step.numpy())} - {shown}",
              flush=True)
    return history

  def evaluate(self, dataset, *, steps: Optional[int] = None) -> Dict[str, float]:
    """Mean loss and metrics over every example of `dataset`, each counted once.

    Under ParameterServerStrategy, `dataset` is a `dataset_fn(input_context)`.
    Without `steps` its dataset must be finite, and the evaluation is exact:
    its batches are split into shards, one closure each, built and read on a
    worker, whose sums come back as the closure's result; a closure re-run
    after a lost worker replaces its result, so every example counts once.
    With `steps`, that many batches are read from each worker's (repeated)
    dataset, as Keras's `evaluate` does there.
    """
    if self.loss is None:
      raise ValueError("evaluate needs the Loop's `loss`. Received: loss=None")
    if self._pss:
      if not callable(dataset) or isinstance(dataset, tf.data.Dataset):
        raise ValueError(
            "Under ParameterServerStrategy, evaluate needs a dataset_fn(input_context): "
            f"each worker builds its own. Received: dataset={type(dataset).__name__}")
      if steps is None:
        return self._logs(self._pss_exact_evaluate(dataset))
      if steps % self.steps_per_loop:
        raise ValueError(
            "Under ParameterServerStrategy, `steps` must be a multiple of `steps_per_loop`. "
            f"Received: steps={steps}, steps_per_loop={self.steps_per_loop}")
      return self._logs(self._pss_epoch("evaluate", self._eval_step, dataset, steps))
    return self._logs(self._sync_epoch("evaluate", self._eval_step,
                                       iter(self._distribute(dataset)), steps))

  def _sync_epoch(self, kind, step_fn, iterator, steps):
    self._reset_sums(kind)
    done = 0
    while steps is None or done < steps:
      chunk = self.steps_per_loop if steps is None else min(self.steps_per_loop, steps - done)
      ran = self._sync_run(kind, step_fn, iterator, chunk)
      if kind == "train":
        self.step.assign_add(ran)
        if self._checkpoint_every and ran and \
            int(self.step.numpy()) % self._checkpoint_every < ran:
          self._save()
      done += ran
      if ran < chunk:
        break  # The data ran out.
    return self._read_sums(kind)

  def _logs(self, totals: Mapping[str, float]) -> Dict[str, float]:
    examples = totals.get(EXAMPLES, 0.0)
    logs = {name: value / examples if examples else float("nan")
            for name, value in totals.items() if name != EXAMPLES}
    logs[EXAMPLES] = examples
    return logs

  def _save(self):
    if self._manager is None:
      return
    # Every worker saves (a save may read values across workers); only the
    # chief's copy stays (TF's rule, as in tfdist.checkpointing).
    write_dir = checkpointing.distributed_file_utils.write_dirpath(
        self._checkpoint_dir, self.strategy)
    if write_dir == self._checkpoint_dir:
      self._manager.save(checkpoint_number=int(self.step.numpy()))
      return
    tf.train.CheckpointManager(self._checkpoint, write_dir, max_to_keep=1).save()
    checkpointing.distributed_file_utils.remove_temp_dirpath(write_dir, self.strategy)

