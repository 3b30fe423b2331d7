"""`Loop`: what every runner shares (the steps, the counting, the epochs, the checkpoint).

A runner subclasses `Loop` naming the strategies it runs (`strategy_types`),
and gives the three things that differ by kind of strategy: how `fit` takes its
input (`_start_fit`), how an epoch's steps run (`_train_epoch`), and how
`evaluate` runs (`_evaluate`). `Loop(strategy, model, ...)` returns the first
runner in `RUNNERS` whose `strategy_types` match, or the first with none (the
fallback); `tfdist.training.loop` registers them there, explicitly and in a
fixed order.
"""

import contextlib
import logging
import signal
import threading
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple, Type

import tensorflow as tf

from tfdist import _folders as folders
from tfdist.task import progress
from tfdist import _keras_support as keras_support
from tfdist import _registry as registry
from tfdist.internals import tensorflow as tf_internals
from tfdist.training import accumulation
from tfdist.training import _local_sgd as local_sgd_lib
from tfdist.training import preemption

logger = logging.getLogger("tfdist")

EXAMPLES = "examples"
# Closures of an exact evaluation under parameter servers: several per worker,
# so a slow or lost worker holds up only a small share.
EVALUATION_SHARDS = 8
StepFn = Callable[..., Mapping[str, tf.Tensor]]

# The runners `Loop(...)` picks from, in order (tfdist/training/loop/__init__.py).
RUNNERS: registry.Registry[Type["Loop"]] = registry.Registry("training-loop runner")


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

  `Loop(...)` returns the runner for the strategy's kind (`SyncRunner` or
  `ParameterServerRunner`), a `Loop` either way.

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
      optimizer, step and input position, written by the chief only; `fit`
      resumes from it exactly (see `fit`).
    checkpoint_every: also save every this many steps (at loop ends); None:
      at epoch ends only. Under parameter servers, saves are at epoch ends.
    checkpointed: more objects the checkpoint saves and restores, by name
      (e.g. a counter your `step_fn` keeps); made under `strategy.scope()`.
    accumulate_steps: the default step computes each replica's batch in this
      many micro-batches and updates once, with the gradient of the whole
      global batch (`tfdist.training.accumulation`); batch the data by the
      global batch of one update.
    local_sgd: a `tfdist.training.LocalSGDOptions`, under (multi-worker)
      mirrored strategies: each replica applies its own gradients and the
      replicas average their weights (local SGD), or step them by an outer
      optimizer (DiLoCo), every `sync_every` steps; None: every step is
      synchronous. The checkpoint keeps the outer state, and each task
      writes its replicas' own weights and optimizer state beside it, so a
      resumed loop goes on exactly.
  """

  # Whether the runner's steps call `_check_sigterm` (the parameter-server
  # runner's closures do not: SIGTERM ends its coordinator as before).
  _checks_sigterm = False
  _sigterm = None

  # The strategies a runner runs; none: it is the fallback.
  strategy_types: Tuple[type, ...] = ()

  def __new__(cls, strategy, *args, **kwargs):
    if cls is Loop:
      cls = _runner_for(strategy)
    return super().__new__(cls)

  def __init__(self, strategy: tf.distribute.Strategy, model, *, loss=None, optimizer=None,
               metrics: Optional[Mapping[str, Callable]] = None,
               step_fn: Optional[StepFn] = None, steps_per_loop: int = 1,
               checkpoint_dir: Optional[str] = None, checkpoint_every: Optional[int] = None,
               checkpointed: Optional[Mapping[str, object]] = None,
               accumulate_steps: int = 1,
               local_sgd: Optional[local_sgd_lib.LocalSGDOptions] = None):
    if step_fn is None and (loss is None or optimizer is None):
      raise ValueError("Loop needs `loss` and `optimizer` for its default step, or a "
                       f"`step_fn`. Received: loss={loss!r}, optimizer={optimizer!r}")
    for field, value in (("steps_per_loop", steps_per_loop),
                         ("checkpoint_every", checkpoint_every)):
      if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                or value < 1):
        raise ValueError(f"`{field}` must be an integer >= 1. Received: {field}={value!r}")
    if checkpoint_dir is None and (checkpointed or checkpoint_every is not None):
      raise ValueError(
          "`checkpointed` and `checkpoint_every` need a `checkpoint_dir` to save into. "
          f"Received: checkpoint_dir=None, checkpoint_every={checkpoint_every!r}, "
          f"checkpointed={sorted(checkpointed or {})}")
    if not getattr(model, "built", True) or not model.trainable_variables:
      raise ValueError("Loop needs a built model: give it an Input layer, or call it on a "
                       f"batch first. Received: an unbuilt {type(model).__name__}")
    self.strategy, self.model, self.loss, self.optimizer = strategy, model, loss, optimizer
    self.metrics = dict(metrics or {})
    self.steps_per_loop = steps_per_loop
    self.accumulate_steps = accumulation.check_steps(accumulate_steps)
    if step_fn is not None and accumulate_steps > 1:
      raise ValueError("`accumulate_steps` applies to the default step; a `step_fn` of your "
                       "own accumulates with tfdist.training.accumulated_gradients. Received: "
                       f"step_fn={step_fn!r}, accumulate_steps={accumulate_steps}")
    if local_sgd is not None:
      local_sgd_lib.check_is_options(local_sgd)
      if step_fn is not None or accumulate_steps > 1:
        raise ValueError(
            "`local_sgd` applies to the default step, and local SGD and gradient accumulation "
            "do not combine (a local step applies one replica's own batch); a `step_fn` of "
            "your own calls LocalSGD.apply_local. Received: "
            f"step_fn={step_fn!r}, accumulate_steps={accumulate_steps}, "
            f"sync_every={local_sgd.sync_every}")
    self._keras3 = keras_support.is_keras3_model(model)
    self._prepare_keras()
    with strategy.scope():
      if optimizer is not None and hasattr(optimizer, "build"):
        optimizer.build(self.trainable_variables)  # Slots on the right devices.
      # Local SGD's outer state: the optimizer's variables, in its checkpoint.
      self.local_sgd = None if local_sgd is None else local_sgd_lib.LocalSGD(
          strategy, self.trainable_variables, optimizer, local_sgd)
      self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="loop_step")
      self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="loop_epoch")
      # Where the input stands in the current `fit` call: the iterators made
      # over its data (one per pass) and the batches read from the newest.
      self.input_iterators = tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name="loop_input_iterators")
      self.input_batches = tf.Variable(0, dtype=tf.int64, trainable=False,
                                       name="loop_input_batches")
    self._step_fn = step_fn or self._default_step
    self._functions = {}  # kind ("train", "evaluate") -> its tf.function
    self._manager = None
    self._checkpoint_every = checkpoint_every
    if checkpoint_dir is not None:
      self._checkpoint_dir = checkpoint_dir
      tracked = {"model": model, "step": self.step, "epoch": self.epoch,
                 "input_iterators": self.input_iterators, "input_batches": self.input_batches}
      if optimizer is not None:
        tracked["optimizer"] = optimizer
      clashes = sorted(set(checkpointed or {}) & (set(tracked) | {"optimizer"}))
      if clashes:
        raise ValueError(f"`checkpointed` names must differ from the loop's own "
                         f"{sorted(set(tracked) | {'optimizer'})}. Received: {clashes}")
      tracked.update(checkpointed or {})
      self._checkpoint = tf.train.Checkpoint(**tracked)
      self._manager = tf.train.CheckpointManager(self._checkpoint, checkpoint_dir, max_to_keep=1)
      if self._manager.latest_checkpoint:
        self._checkpoint.restore(self._manager.latest_checkpoint).expect_partial()
        if self.local_sgd is not None:  # Each replica's own weights and optimizer state.
          self.local_sgd.restore_replicas(checkpoint_dir)

  # --- what a runner gives ---------------------------------------------------

  def _prepare_keras(self) -> None:
    """Before any variable is made: what the runner's Keras needs (nothing by default)."""

  def _start_fit(self, dataset, steps_per_epoch: Optional[int],
                 position: Tuple[int, int]) -> None:
    """Checks `fit`'s input and makes what its epochs read.

    `position`: (iterators made, batches read from the newest) by the
    interrupted `fit` call this one resumes; (0, 0) for a new call.
    """
    raise NotImplementedError

  def _end_fit(self) -> None:
    """Lets go of what `_start_fit` made (nothing by default)."""

  def _train_epoch(self, steps: Optional[int], last: bool) -> Dict[str, float]:
    """Runs one epoch (`steps`, or one pass if None); returns its sums and counts the steps."""
    raise NotImplementedError

  def _evaluate(self, dataset, steps: Optional[int]) -> Dict[str, float]:
    """The sums of an evaluation of `dataset`."""
    raise NotImplementedError

  # --- the steps -------------------------------------------------------------

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
    return [shard for v in self.model.trainable_variables
            for shard in tf_internals.shards(v.value) or [v]]

  def _default_step(self, batch):
    if self.accumulate_steps > 1:
      return self._accumulating_step(batch)
    x, y = batch[0], batch[1]
    model = self.model
    with tf.GradientTape() as tape:
      y_pred = model(x, training=True)
      per_example = _per_example(self.loss, y, y_pred)
      loss = average_loss(per_example, model.losses)
      loss = self._scaled(loss)
    variables = self.trainable_variables
    grads = tape.gradient(loss, variables)
    if hasattr(self.optimizer, "get_unscaled_gradients"):
      grads = self.optimizer.get_unscaled_gradients(grads)
    if self.local_sgd is not None:
      self.local_sgd.apply_local(grads, variables)
    else:
      self.optimizer.apply_gradients(zip(grads, variables))
    return self._sums_of(per_example, y, y_pred)

  def _scaled(self, loss):
    # Under mixed_float16 compile's LossScaleOptimizer scales the loss (each Keras its way).
    if hasattr(self.optimizer, "get_scaled_loss"):  # tf_keras
      return self.optimizer.get_scaled_loss(loss)
    if hasattr(self.optimizer, "scale_loss"):  # Keras 3; apply_gradients unscales.
      return self.optimizer.scale_loss(loss)
    return loss

  def _accumulating_step(self, batch):
    """The default step in `accumulate_steps` micro-batches, one update (accumulation.py)."""
    model = self.model
    local = tf.cast(_batch_size(batch), tf.float32)

    def loss_fn(micro, share):
      x, y = micro[0], micro[1]
      y_pred = model(x, training=True)
      per_example = _per_example(self.loss, y, y_pred)
      examples = tf.cast(tf.shape(per_example)[0], tf.float32)
      # The micro-batch's mean weighted by its share of the global batch, and
      # by its share of the replica's batch the regularization that
      # average_loss adds once per replica (all of it on an empty replica).
      loss = tf.math.divide_no_nan(tf.reduce_sum(per_example), examples) * share
      if model.losses:
        loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses)) * tf.where(
            local > 0, tf.math.divide_no_nan(examples, local), 1.0)
      return self._scaled(loss), self._sums_of(per_example, y, y_pred)

    variables = self.trainable_variables
    grads, sums = accumulation.accumulated_gradients(batch, self.accumulate_steps, loss_fn,
                                                     variables, has_aux=True)
    if hasattr(self.optimizer, "get_unscaled_gradients"):
      grads = self.optimizer.get_unscaled_gradients(grads)
    accumulation.apply_gradients(self.optimizer, grads, variables)
    return sums

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

  # --- the public loop -------------------------------------------------------

  def fit(self, dataset, *, epochs: int = 1, steps_per_epoch: Optional[int] = None,
          verbose: bool = True) -> Dict[str, list]:
    """Trains for `epochs`, from where the checkpoint left off; returns the epoch logs.

    `dataset`: a `tf.data.Dataset` batched by the global batch size, or a
    `dataset_fn(input_context)` batched per replica (required under parameter
    servers). Without `steps_per_epoch` an epoch is one pass over the data.
    Each epoch's logs go to the `tfdist` logger (INFO) when `verbose`.

    Resumed from a checkpoint (after a SIGKILL, a SIGTERM or a crash), the
    synchronous runner reads on exactly where the checkpoint was written: it
    makes as many iterators over the data as the interrupted call had made
    (each draws the next shuffle order from the dataset's seed, as
    `shuffle(..., seed=, reshuffle_each_iteration=True)` does) and skips the
    batches already trained on. With a deterministic pipeline the resumed job
    trains on the same batches, in the same order, as one never interrupted,
    and ends with the same weights. A pipeline that cannot be replayed (a
    `py_function`, an unseeded shuffle, a non-deterministic map) is named once,
    in a warning, before training starts. Under parameter servers a closure
    re-run after a lost worker makes steps at-least-once, and a resumed epoch
    starts its data again (docs/guides/checkpoints.md).

    With a `checkpoint_dir`, SIGTERM during `fit` (what SLURM and Kubernetes
    send before they stop a task) makes the synchronous runner save a
    checkpoint at its next check, about a second of training later, on every
    worker at the same step, and exit with 143: run the job again to resume.
    """
    self._start_fit(dataset, steps_per_epoch,
                    (int(self.input_iterators.numpy()), int(self.input_batches.numpy())))
    # Under a launch: the next step may compile, and a peer waiting in the check of what
    # every worker builds learns how many variables this task made (tfdist.task.progress).
    progress.training_begins()
    try:
      with self._sigterm_checks():
        return self._fit_epochs(epochs, steps_per_epoch, verbose)
    finally:
      self._end_fit()

  def _fit_epochs(self, epochs, steps_per_epoch, verbose) -> Dict[str, list]:
    history: Dict[str, list] = {}
    for epoch in range(int(self.epoch.numpy()), epochs):
      steps = steps_per_epoch
      if steps_per_epoch is not None:  # Resumed mid-epoch: only the steps left.
        done = int(self.step.numpy()) - epoch * steps_per_epoch
        steps -= done if 0 < done < steps_per_epoch else 0
      last = epoch + 1 == epochs
      totals = self._train_epoch(steps, last=last)
      self.epoch.assign(epoch + 1)
      if last:  # A later `fit` call reads its data from the start, as Keras's does.
        self.input_iterators.assign(0)
        self.input_batches.assign(0)
      logs = self._logs(totals)
      for name, value in logs.items():
        history.setdefault(name, []).append(value)
      self._save()
      progress.epoch_end()  # Under a launch: its step times written; the chief names a straggler.
      if verbose:
        shown = " - ".join(f"{k}: {v:.6g}" for k, v in logs.items())
        logger.info("Epoch %d/%d - step %d - %s", epoch + 1, epochs, int(self.step.numpy()),
                  shown)
    return history

  # --- SIGTERM: a checkpoint at the next check, then exit 143 ------------------

  @contextlib.contextmanager
  def _sigterm_checks(self):
    """While `fit` runs, SIGTERM saves a checkpoint at the next check and exits 143.

    Only with a `checkpoint_dir`. Under MultiWorkerMirroredStrategy TensorFlow
    catches SIGTERM itself once the strategy exists (its preemption notifier),
    and a task then trains on until SIGKILL; here every worker agrees at each
    check, through one small all-reduce, so all of them save at the same step.
    Checks come about every `preemption.CHECK_SECONDS` of training.
    """
    if (self._manager is None or not self._checks_sigterm
        or threading.current_thread() is not threading.main_thread()):
      self._sigterm = None
      yield
      return
    schedule = preemption.Schedule(preemption.any_worker(self.strategy)
                                   if tf_internals.is_multi_worker_mirrored(self.strategy)
                                   else None)
    schedule.restart(int(self.step.numpy()))
    self._sigterm = {"received": False, "schedule": schedule}
    previous = signal.signal(signal.SIGTERM,
                             lambda signum, frame: self._sigterm.update(received=True))
    try:
      yield
    finally:
      signal.signal(signal.SIGTERM, previous)
      self._sigterm = None

  def _check_sigterm(self) -> None:
    """After a loop of steps: exit after a checkpoint if any worker got SIGTERM."""
    state, step = self._sigterm, int(self.step.numpy())
    if state is None or not state["schedule"].due(step):
      return
    if state["schedule"].agreed(state["received"], step):
      self._save()
      logger.info("Loop: SIGTERM: saved a checkpoint at step %d to %s; exiting with code %d. "
                  "Run the same job again to resume there.", step, self._checkpoint_dir,
                  preemption.PREEMPTED_EXIT_CODE)
      raise SystemExit(preemption.PREEMPTED_EXIT_CODE)

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
    return self._logs(self._evaluate(dataset, steps))

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
    # chief's copy stays (TF's rule, as in tfdist.training.checkpoints).
    folders.makedirs(self._checkpoint_dir)  # Its user's only: restored as found.
    if self.local_sgd is not None:  # The checkpoint holds one replica's copies: each task's own.
      self.local_sgd.save_replicas(self._checkpoint_dir)
    with tf_internals.chief_dir(self._checkpoint_dir, self.strategy) as write_dir:
      if write_dir == self._checkpoint_dir:
        self._manager.save(checkpoint_number=int(self.step.numpy()))
      else:
        tf.train.CheckpointManager(self._checkpoint, write_dir, max_to_keep=1).save()


def _runner_for(strategy) -> Type[Loop]:
  fallback = None
  for _, runner in RUNNERS.items():
    if not runner.strategy_types:
      fallback = fallback or runner
    elif isinstance(strategy, runner.strategy_types):
      return runner
  if fallback is None:
    raise TypeError("No training-loop runner is registered: import tfdist.training.loop, "
                    f"which registers them. Received: {type(strategy).__name__}")
  return fallback

