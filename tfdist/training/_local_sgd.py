"""Local SGD and DiLoCo: each replica trains alone for `sync_every` steps, then they average.

Under (multi-worker) mirrored strategies every step all-reduces the gradients:
one round trip per step, which sets the pace on a slow link or with many
workers. Local SGD lets each replica apply the gradient of its own share of
the batch for H = `sync_every` steps, then averages the replicas' weights:
one all-reduce of the weights every H steps instead of one of the gradients
every step. DiLoCo (Douillard et al. 2023, "DiLoCo: Distributed
Low-Communication Training of Language Models", arXiv:2311.08105) averages the
change instead: the pseudo-gradient (the weights at the last sync minus the
mean of the replicas' weights now) goes to an outer optimizer, SGD with
Nesterov momentum (the paper's outer learning rate 0.7, momentum 0.9), which
moves the weights of the last sync; every replica starts again from there.

The outer optimizer may also be a Keras optimizer object of the model's Keras
(`LocalSGDOptions(H, outer_optimizer=keras.optimizers.SGD(0.7, momentum=0.9, nesterov=True))`),
which steps the weights of the last sync on the pseudo-gradient.

What each replica keeps for itself, as both methods say: its inner
optimizer's state (Adam's moments), and between syncs its weights. What every
replica holds alike: DiLoCo's weights at the last sync and its outer state
(the outer momentum, or the outer optimizer's variables). They are variables
of the inner optimizer (`add_variable_from_reference`), or an optimizer
tracked by it, so Keras's `BackupAndRestore` (either Keras), tfdist's and the
Loop's checkpoints keep them with the optimizer, and the optimizer's
`iterations` says where the next sync falls. A checkpoint holds one copy of a
mirrored variable (the first replica's), so each worker also writes its own
replicas' copies of what differs between them (`save_replicas`) beside the
backup, in a folder of its own, before the backup; `restore_replicas` puts
them back after the backup is restored: tfdist's backups (`fit`, either
Keras) and the Loop's checkpoint do both, and a resumed job ends as one never
stopped.

With sync_every=1, plain SGD and no outer optimizer, local SGD is ordinary
synchronous training: the mean of the replicas' steps is the step on the mean
gradient. Adam and other stateful optimizers differ even at H=1 (each
replica's moments see its own gradients).

Example:

    >>> with strategy.scope():                       # multi_worker_mirrored
    ...   model = make_model()
    ...   model.compile(optimizer="adam", loss="mse")
    >>> options = tfdist.training.LocalSGDOptions(sync_every=16, outer_optimizer="nesterov")
    >>> tfdist.training.local_sgd(model, options)
    >>> model.fit(dataset, epochs=3)                # one average every 16 steps
"""

import dataclasses
import logging
import types
from typing import Any, Optional

from tfdist import _keras_support as keras_support
from tfdist.training import _replica_copies as replica_copies

logger = logging.getLogger("tfdist")

OUTER_OPTIMIZERS = ("none", "nesterov")
# DiLoCo's outer Nesterov SGD (Douillard et al. 2023, section 3).
OUTER_LEARNING_RATE = 0.7
OUTER_MOMENTUM = 0.9
# What `local_sgd` sets on the model: its LocalSGD.
ATTRIBUTE = "_tfdist_local_sgd"
# The inner optimizer's attribute holding an outer optimizer object: checkpoints and
# Keras 3's weights files save what an optimizer tracks.
OUTER_ATTRIBUTE = "_tfdist_outer_optimizer"


def of(model) -> Optional["LocalSGD"]:
  """The LocalSGD `local_sgd` gave `model`, or None."""
  return vars(model).get(ATTRIBUTE)


def _check_options(sync_every, outer_optimizer, outer_learning_rate, outer_momentum) -> str:
  """The outer optimizer's kind ("none", "nesterov" or "optimizer", an object); a ValueError naming a bad field."""
  if isinstance(sync_every, bool) or not isinstance(sync_every, int) or sync_every < 1:
    raise ValueError("`sync_every` must be an integer >= 1 (local steps between averages). "
                     f"Received: sync_every={sync_every!r}")
  if not isinstance(outer_optimizer, (str, type(None))) and \
      hasattr(outer_optimizer, "apply_gradients"):
    # Its own learning rate and momentum (checked against the model's Keras later): the
    # "nesterov" ones given too would be ignored.
    given = (("outer_learning_rate", outer_learning_rate, OUTER_LEARNING_RATE),
             ("outer_momentum", outer_momentum, OUTER_MOMENTUM))
    for field, value, default in given:
      if value != default:
        raise ValueError(
            f"`{field}` is for outer_optimizer='nesterov', and an outer optimizer object has "
            f"its own: set it on the optimizer and leave {field} out. Received: "
            f"{field}={value!r}, outer_optimizer={type(outer_optimizer).__name__}")
    return "optimizer"
  name = "none" if outer_optimizer is None else outer_optimizer
  if name not in OUTER_OPTIMIZERS:
    raise ValueError(f"`outer_optimizer` must be one of {list(OUTER_OPTIMIZERS)}, None or a "
                     "Keras optimizer (nesterov: DiLoCo's outer SGD with Nesterov momentum). "
                     f"Received: outer_optimizer={outer_optimizer!r}")
  if name == "none":  # Plain local SGD averages: a learning rate or momentum would be ignored.
    for field, value, default in (("outer_learning_rate", outer_learning_rate, OUTER_LEARNING_RATE),
                                  ("outer_momentum", outer_momentum, OUTER_MOMENTUM)):
      if value != default:
        raise ValueError(f"`{field}` is for outer_optimizer='nesterov'; plain local SGD "
                         f"averages the weights. Received: {field}={value!r}, "
                         "outer_optimizer='none'")
  if not outer_learning_rate > 0:
    raise ValueError("`outer_learning_rate` must be > 0 (DiLoCo's is 0.7). Received: "
                     f"outer_learning_rate={outer_learning_rate!r}")
  if not 0 <= outer_momentum < 1:
    raise ValueError("`outer_momentum` must be in [0, 1) (DiLoCo's is 0.9). Received: "
                     f"outer_momentum={outer_momentum!r}")
  return name


@dataclasses.dataclass(frozen=True)
class LocalSGDOptions:
  """Local SGD's and DiLoCo's options: one value, checked when it is made.

  `tfdist.training.local_sgd`, `LocalSGD`, the Loop (`local_sgd=`) and the
  training job (`TrainConfig(local_sgd=)`) take it; `tfdist train` makes one
  from `--sync_every` and the `--outer_*` flags.

  Attributes:
    sync_every: local steps between averages (H >= 1).
    outer_optimizer: "none" or None (local SGD: average the weights),
      "nesterov" (DiLoCo: the mean change since the last sync applied by SGD
      with Nesterov momentum), or a new Keras optimizer of the model's Keras,
      e.g. `keras.optimizers.SGD(0.7, momentum=0.9, nesterov=True)` (DiLoCo
      with it; its state is saved with the model's optimizer). An optimizer
      must not be built yet, and a Keras 3 one must be made in the
      strategy's scope.
    outer_learning_rate, outer_momentum: the "nesterov" outer SGD's (DiLoCo's
      0.7 and 0.9); refused beside an optimizer object, which has its own.

  Raises:
    ValueError: a bad field, named with what was received.

  Example:

      >>> LocalSGDOptions(sync_every=16, outer_optimizer="nesterov")
  """

  sync_every: int
  outer_optimizer: Any = "none"
  outer_learning_rate: float = OUTER_LEARNING_RATE
  outer_momentum: float = OUTER_MOMENTUM

  def __post_init__(self):
    if self.outer_optimizer is None:
      object.__setattr__(self, "outer_optimizer", "none")
    _check_options(self.sync_every, self.outer_optimizer, self.outer_learning_rate,
                   self.outer_momentum)

  @property
  def outer_kind(self) -> str:
    """"none", "nesterov", or "optimizer" for an optimizer object."""
    return self.outer_optimizer if isinstance(self.outer_optimizer, str) else "optimizer"


def check_strategy(strategy) -> None:
  """A ValueError unless `strategy` keeps one copy of the weights per replica."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if isinstance(strategy, (tf.distribute.MirroredStrategy,
                           tf.distribute.MultiWorkerMirroredStrategy)):
    return
  why = ("parameter servers hold one copy of the weights, updated by every worker"
         if isinstance(strategy, tf.distribute.ParameterServerStrategy) else
         "it keeps one copy of the weights, not one per replica")
  raise ValueError(
      "Local SGD and DiLoCo (`local_sgd`) average the replicas' own copies of the weights, "
      f"which only multi_worker_mirrored and mirrored keep; under this strategy {why}: "
      f"use multi_worker_mirrored or drop local_sgd. Received: {type(strategy).__name__}")


class LocalSGD:
  """Local steps and the periodic average of one model's variables under one strategy.

  Made in the strategy's scope, after the optimizer exists. `apply_local`
  runs in a replica (inside a step); `steps_done` after steps, outside any
  `tf.function`, averages when a sync is due. A backup of the model resumes
  every replica as it was with `save_replicas` before it is written and
  `restore_replicas` after it is restored.

  Args:
    strategy: a mirrored or multi-worker mirrored strategy.
    variables: the trainable variables, as the optimizer is given them.
    optimizer: the inner optimizer (either Keras); not a LossScaleOptimizer.
    options: a `LocalSGDOptions`: how often to sync, and with what.

  Example:

      >>> state = LocalSGD(strategy, model.trainable_variables, optimizer,
      ...                  LocalSGDOptions(sync_every=8))
      >>> # in your train_step: state.apply_local(grads, model.trainable_variables)
      >>> # after each step, outside tf.function: state.steps_done()
  """

  def __init__(self, strategy, variables, optimizer, options: LocalSGDOptions):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    check_is_options(options)
    self.options = options
    self.outer_optimizer = options.outer_kind
    check_strategy(strategy)
    if hasattr(optimizer, "inner_optimizer"):
      raise ValueError("Local SGD takes the optimizer's own steps, and a LossScaleOptimizer "
                       "(mixed_float16) skips steps together across replicas: train in "
                       "float32 or mixed_bfloat16. Received: "
                       f"{type(optimizer).__name__}")
    self.strategy, self.optimizer = strategy, optimizer
    self.sync_every = options.sync_every
    self.outer_learning_rate, self.outer_momentum = (options.outer_learning_rate,
                                                     options.outer_momentum)
    self._keras3 = keras_support.is_keras3_model(optimizer)
    # The outer optimizer object, if one was given.
    self.outer = options.outer_optimizer if self.outer_optimizer == "optimizer" else None
    if self.outer is not None:
      self._check_outer()
    self._variables = list(variables)
    # The TF variables behind Keras 3's (whose own wrap them).
    self._tf_variables = [self._tf(v) for v in self._variables]
    with strategy.scope():
      if not getattr(optimizer, "built", False):  # tf_keras's build runs once itself.
        optimizer.build(self._variables)  # Its own variables first, in their order.
      if self._keras3:
        self._enable_local_updates(optimizer)
      self._anchors, self._momenta, outer_variables = [], [], []
      if self.outer_optimizer != "none":
        for v in self._variables:  # As the optimizers take them (Keras 3's own variables).
          outer_variables.append(self._add_like(v, "local_sgd_anchor"))
          if self.outer is None:
            self._momenta.append(self._tf(self._add_like(v, "local_sgd_momentum")))
        self._anchors = [self._tf(a) for a in outer_variables]
        for anchor, v in zip(self._anchors, self._tf_variables):
          anchor.assign(v)  # The weights now, the same on every replica.
      if self.outer is not None:
        self._build_outer(outer_variables)
    self._outer_variables = outer_variables
    self._synced = None  # The optimizer's iterations at the last sync seen (a host copy).
    self.local_logs = False  # Whether fit's step logs this replica's own metrics.
    self._sync = tf.function(lambda: self._sync_all())  # One function per instance.
    self.syncs = 0

  def _tf(self, variable):
    return getattr(variable, "value", variable) if self._keras3 else variable

  def _enable_local_updates(self, optimizer):
    from tfdist.internals import keras as keras_internals  # pylint: disable=g-import-not-at-top
    if not keras_internals.enable_local_updates(optimizer):
      raise ValueError(
          "Local SGD under Keras 3 turns its optimizers' all-reduce off, which needs a "
          f"tested Keras ({keras_internals.unsupported_reason(patch='local_updates')}): "
          "use tf_keras or a tested Keras 3. Received: "
          f"Keras {keras_internals.keras_version()}")

  def _check_outer(self):
    outer = self.outer
    model_keras, outer_keras = (("Keras 3" if keras3 else "tf_keras")
                                for keras3 in (self._keras3, keras_support.is_keras3_model(outer)))
    if model_keras != outer_keras or outer is self.optimizer or hasattr(outer, "inner_optimizer"):
      raise ValueError(
          f"`outer_optimizer` must be an optimizer of the model's Keras ({model_keras}), new, "
          "and not the inner one nor a LossScaleOptimizer: make one with that Keras's "
          f"keras.optimizers in the strategy's scope. Received: {outer_keras} "
          f"{type(outer).__name__}")
    if not self._keras3:
      import tf_keras  # pylint: disable=g-import-not-at-top
      if isinstance(outer, tf_keras.optimizers.legacy.Optimizer):
        raise ValueError(
            "`outer_optimizer` must be a tf_keras.optimizers one, not a legacy optimizer (it "
            "cannot be built on the weights at the last sync): use tf_keras.optimizers.SGD or "
            f"another non-legacy one. Received: legacy {type(outer).__name__}")
    # local_sgd builds it on the weights at the last sync; one built already (on other
    # variables) keeps those (tf_keras builds once) and fails at the first sync.
    built = outer.built if self._keras3 else \
        any(v is not outer.iterations for v in outer.variables)
    if built:
      raise ValueError(
          "`outer_optimizer` must be new, not built (local_sgd builds it on the weights at the "
          "last sync): make a new one for local_sgd, and do not use it elsewhere. Received: "
          f"{type(outer).__name__} built already, with {len(outer.variables)} variables")
    # Keras 3 makes an optimizer's iterations (and learning rate) when the optimizer is
    # made: outside the scope they are not mirrored. tf_keras's steps update them in
    # cross-replica context, which works either way.
    if self._keras3 and not self.strategy.extended.variable_created_in_scope(
        self._tf(outer.iterations)):
      raise ValueError(
          "`outer_optimizer` must be made in the strategy's scope under Keras 3 (its variables "
          "are made with it, and outside the scope they are not mirrored): make it inside "
          f"`with strategy.scope():`. Received: {type(outer).__name__} made outside it")

  def _build_outer(self, anchors):
    """Builds the outer optimizer on the anchors; the inner one tracks it (so backups keep it)."""
    self.outer.build(anchors)
    if self._keras3:
      self._enable_local_updates(self.outer)
    setattr(self.optimizer, OUTER_ATTRIBUTE, self.outer)

  def _add_like(self, variable, name):
    """An optimizer variable shaped as `variable`: saved and restored with the optimizer."""
    if self._keras3:
      return self.optimizer.add_variable_from_reference(variable, name=name)
    return self.optimizer.add_variable_from_reference(variable, name)

  def apply_local(self, grads, variables) -> None:
    """Applies the replica's own gradients (of its batch's mean loss), no all-reduce.

    `grads` are those of Keras's loss, which divides the replica's mean by
    the number of replicas (so that their sum is the global batch's): times
    the replicas, each replica steps on its own batch's mean loss.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    replicas = tf.distribute.get_strategy().num_replicas_in_sync

    def scaled(g):
      if isinstance(g, tf.IndexedSlices):  # An embedding's: its rows.
        return tf.IndexedSlices(g.values * tf.cast(replicas, g.dtype), g.indices, g.dense_shape)
      return g * tf.cast(replicas, g.dtype)

    pairs = [(scaled(g), v) for g, v in zip(grads, variables) if g is not None]
    self._apply(self.optimizer, pairs)

  def _apply(self, optimizer, pairs):
    if self._keras3:  # All-reduce turned off on this optimizer (enable_local_updates).
      optimizer.apply_gradients(pairs)
    else:
      optimizer.apply_gradients(pairs, skip_gradients_aggregation=True)

  def steps_to_sync(self) -> int:
    """Steps left before the next sync (1 to sync_every), from the optimizer's iterations."""
    return self.sync_every - int(self.optimizer.iterations.numpy()) % self.sync_every

  def begin(self) -> None:
    """Before a run of steps (a `fit`): the last sync point, from the optimizer's iterations.

    They are restored with a backup, so a resumed job syncs where the
    interrupted one would have.
    """
    done = int(self.optimizer.iterations.numpy())
    self._synced = done - done % self.sync_every

  def steps_done(self, since: Optional[int] = None) -> bool:
    """After steps: averages if a sync point was reached; whether it did.

    `since`: the optimizer's iterations before those steps (then a sync is
    due if they crossed a multiple of `sync_every`); None: since the last
    sync seen (`begin`).
    """
    done = int(self.optimizer.iterations.numpy())
    if since is None:
      if self._synced is None:
        self.begin()
      due = done - self._synced >= self.sync_every
    else:
      due = done // self.sync_every > since // self.sync_every
    if not due:
      return False
    self.sync()
    self._synced = done - done % self.sync_every
    return True

  def sync(self) -> None:
    """Averages the replicas now (local SGD), or takes DiLoCo's outer step."""
    self._sync()
    self.syncs += 1

  def _sync_all(self):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    strategy, variables = self.strategy, self._tf_variables
    update = strategy.extended.update
    assign = lambda variable, value: variable.assign(value)

    def replica_means():
      # In a replica a mirrored variable reads its own copy.
      return tf.distribute.get_replica_context().all_reduce(
          tf.distribute.ReduceOp.MEAN, [v.read_value() for v in variables])

    if self.outer is not None:
      def outer_step():
        # The pseudo-gradient, the same on every replica: each applies it to its own copy.
        grads = [a.read_value() - m for a, m in zip(self._anchors, replica_means())]
        self._apply(self.outer, list(zip(grads, self._outer_variables)))

      strategy.run(outer_step)
      for v, anchor in zip(variables, self._anchors):
        update(v, assign, args=(anchor,), group=False)
      return
    means = strategy.run(replica_means)
    if self.outer_optimizer == "none":
      for v, mean in zip(variables, means):
        update(v, assign, args=(mean,), group=False)
      return
    lr, mu = self.outer_learning_rate, self.outer_momentum
    for v, mean, anchor, momentum in zip(variables, means, self._anchors, self._momenta):
      # The pseudo-gradient: where the replicas went on average, from the last sync.
      update(momentum, lambda b, a, m: b.assign(mu * b + (a - m)), args=(anchor, mean),
             group=False)
      update(anchor, lambda a, m, b: a.assign_sub(lr * ((a - m) + mu * b)),
             args=(mean, momentum), group=False)
      update(v, assign, args=(anchor,), group=False)

  # --- each replica's own copies, beside a backup (tfdist.training._replica_copies) ---

  def _differing(self) -> list:
    """What differs between replicas: the weights and the inner optimizer's variables.

    Not the outer state, which every replica holds alike.
    """
    alike = {id(v) for v in self._anchors + self._momenta}
    return self._tf_variables + [v for v in (self._tf(o) for o in self.optimizer.variables)
                                 if id(v) not in alike]

  def save_replicas(self, directory: str) -> None:
    """Writes this task's replicas' own weights and inner optimizer state beside a backup.

    Call it on every worker just before the backup in `directory` is written.
    """
    replica_copies.write(self.strategy, self._differing(), directory,
                         int(self.optimizer.iterations.numpy()))

  def restore_replicas(self, directory: str) -> bool:
    """After a backup in `directory` was restored: each replica's own copies, as saved with it.

    Whether they were found; if not (a backup written without them), every
    replica goes on from the first replica's copies, which the backup holds,
    and a warning says so.
    """
    found = replica_copies.read(self.strategy, self._differing(), directory,
                                int(self.optimizer.iterations.numpy()))
    self.begin()  # The sync point, from the restored iterations.
    return found

  def remove_replicas(self, directory: str) -> None:
    """Removes this task's copies beside a backup (when the backup is deleted)."""
    replica_copies.remove(self.strategy, directory)


def check_is_options(options) -> None:
  """A TypeError unless `options` is a LocalSGDOptions."""
  if not isinstance(options, LocalSGDOptions):
    raise TypeError("Local SGD takes its options as one value: "
                    "tfdist.training.LocalSGDOptions(sync_every=H, ...). "
                    f"Received: {options!r}")


def local_sgd(model, options: LocalSGDOptions):
  """Makes `model.fit` train each replica alone and average every `sync_every` steps.

  Call it after `compile`, in the strategy's scope or on a model built in it,
  under multi_worker_mirrored (or mirrored). Each replica applies the
  gradient of its own share of every batch with the compiled optimizer
  (whose state stays its own); every `sync_every` steps the replicas'
  weights are averaged (`outer_optimizer="none"`, local SGD), or their mean
  change since the last sync is applied by DiLoCo's outer SGD with Nesterov
  momentum (`"nesterov"`), or by the Keras optimizer given. The sync counts
  the optimizer's `iterations`, so it survives a backup and a restart; with
  tfdist's backup (`tfdist.training.checkpoints.backup_and_restore`) every
  replica resumes with its own weights and optimizer state. Under
  multi-worker MWMS a tf_keras model's logged loss and metrics are each
  worker's own (its running means: reading them across workers would take
  four collectives a step); under mirrored, and for Keras 3, they are the
  replicas' mean, as usual.

  Args:
    model: a compiled Keras model (either Keras) with Keras's own `train_step`.
    options: a `LocalSGDOptions`: `sync_every` and the outer optimizer.

  Returns:
    `model`.

  Raises:
    ValueError: a strategy without one copy of the weights per replica (one
      device, central storage, parameter servers); an uncompiled model;
      gradient accumulation or a LossScaleOptimizer; an outer optimizer of
      the other Keras, built already, or a Keras 3 one made outside the
      strategy's scope.
    TypeError: the model has a `train_step` of its own; `options` is not a
      `LocalSGDOptions`.

  Example:

      >>> model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
      >>> LocalSGDOptions = tfdist.training.LocalSGDOptions
      >>> tfdist.training.local_sgd(model, LocalSGDOptions(4)).fit(dataset, epochs=2)
      >>> with strategy.scope():
      ...   outer = keras.optimizers.SGD(0.7, momentum=0.9, nesterov=True)
      >>> tfdist.training.local_sgd(other_model, LocalSGDOptions(16, outer_optimizer=outer))
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfdist.internals import keras as keras_internals  # pylint: disable=g-import-not-at-top
  from tfdist.training import accumulation  # pylint: disable=g-import-not-at-top
  check_is_options(options)
  sync_every = options.sync_every
  if getattr(model, "optimizer", None) is None:
    raise ValueError("local_sgd needs a compiled model: call `model.compile(...)` first. "
                     f"Received: {type(model).__name__} without an optimizer")
  if vars(model).get(accumulation.STEPS_ATTRIBUTE, 1) > 1:
    raise ValueError("Local SGD and gradient accumulation do not combine: a local step "
                     "applies one replica's own batch; drop one of them. Received: "
                     f"accumulate_steps={vars(model)[accumulation.STEPS_ATTRIBUTE]}, "
                     f"sync_every={sync_every}")
  if ATTRIBUTE in vars(model):
    raise ValueError("local_sgd was called on this model already (its outer state exists); "
                     f"build a new model to change it. Received: sync_every={sync_every}")
  if "train_step" in vars(model) or not keras_support.has_keras_train_step(model):
    raise TypeError("local_sgd replaces Keras's own train_step, and this model has its own "
                    "(or tfdist's): call LocalSGD.apply_local in yours instead. Received: "
                    f"{type(model).__name__}.train_step")
  strategy = (keras_internals.distribute_strategy(model) if keras_support.is_keras3_model(model)
              else model.distribute_strategy) or tf.distribute.get_strategy()
  state = LocalSGD(strategy, model.trainable_variables, model.optimizer, options)
  # Under multi-worker MWMS each worker logs its own tf_keras metrics, taken as they are
  # ("first"): no collective per step but the syncs.
  state.local_logs = not keras_support.is_keras3_model(model) and \
      keras_support.is_multi_worker_mirrored(strategy)
  if state.local_logs and model.distribute_reduction_method == "auto":
    model.distribute_reduction_method = "first"
  setattr(model, ATTRIBUTE, state)
  model.train_step = types.MethodType(_train_step, model)
  model.make_train_function = types.MethodType(_make_train_function, model)
  model.train_function = None  # Traced again, with this step.
  return model


def _make_train_function(self, force=False):
  """Keras's own, then the sync after every call of the function it made that reached one."""
  type(self).make_train_function(self, force=force)
  function = self.train_function
  state = getattr(self, ATTRIBUTE)
  if not getattr(function, "_tfdist_syncs", False):

    def train_function(*args, **kwargs):
      # Counted from the iterations before the call: Keras makes this function before
      # on_train_begin restores a backup, and a resumed job syncs where it would have.
      since = int(state.optimizer.iterations.numpy())
      logs = function(*args, **kwargs)
      state.steps_done(since)
      return logs

    train_function._tfdist_syncs = True  # pylint: disable=protected-access
    self.train_function = train_function
  return self.train_function


def _train_step(self, data):
  """Keras's `train_step` (either Keras), its gradients applied by this replica alone."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  keras3 = keras_support.is_keras3_model(self)
  if keras3:
    import keras  # pylint: disable=g-import-not-at-top
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
  else:
    import tf_keras  # pylint: disable=g-import-not-at-top
    x, y, sample_weight = tf_keras.utils.unpack_x_y_sample_weight(data)
  replicas = tf.distribute.get_strategy().num_replicas_in_sync
  with tf.GradientTape() as tape:
    y_pred = self(x, training=True)
    # Keras's loss: the replica's mean divided by the replicas (both Kerases).
    loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight)
  if keras3:  # tf_keras's compute_loss updates its loss tracker itself.
    tracker = next((m for m in self.metrics if m.name == "loss"), None)
    if tracker is not None:
      tracker.update_state(loss * replicas,
                           sample_weight=tf.shape(tf.nest.flatten(x)[0])[0])
  variables = self.trainable_variables
  state = getattr(self, ATTRIBUTE)
  state.apply_local(tape.gradient(loss, variables), variables)
  if keras3 or not state.local_logs:
    return self.compute_metrics(x, y, y_pred, sample_weight)
  self.compiled_metrics.update_state(y, y_pred, sample_weight)
  return _local_logs(self.metrics)


def _local_logs(metrics) -> dict:
  """tf_keras's logs from this replica's own metric totals: no all-reduce per step.

  Keras reads a metric's result across workers, one collective per variable
  (four for a loss and an accuracy), every step: more than the gradients'
  all-reduce local SGD leaves out. A `Mean` (the loss, accuracy, ...) is read
  from its local total and count; other metrics Keras's way.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  logs = {}
  for metric in metrics:
    if isinstance(metric, tf_keras.metrics.Mean) and \
        type(metric).result is tf_keras.metrics.Mean.result:
      total, count = metric.variables  # In a replica: its own copies.
      logs[metric.name] = tf.math.divide_no_nan(total.read_value(), count.read_value())
    else:
      result = metric.result()
      logs.update(result if isinstance(result, dict) else {metric.name: result})
  return logs
