"""Does my model train the same under the strategy? Step by step against one device.

`verify(model_fn, dataset_fn, strategy=...)` builds your compiled model twice,
once under the strategy and once on one device (TensorFlow's default
strategy), gives both the same initial weights, and trains both on the same
global batches with Keras's own `fit` (one call each, `steps_per_execution`
1). Before each step it computes the batch's loss and gradients on both sides (with the
model's `compute_loss`, in training mode; the layers' state is put back
after, so the step itself sees what it would have seen); after each step it
compares the weights, and the copies of every weight that the replicas (and
workers) hold. The report names the first step at which the loss, the
gradients or the weights differ beyond `tolerance`, relative to the largest
one-device value (or absolute, below 1), and any difference between replicas.

Under multi_worker_mirrored run it as every task of a cluster (`tfdist verify
--strategy=multi_worker_mirrored --workers=2` launches one here): each worker
reads the whole global batch for the one-device side and its own share for
the strategy's, and the replicas' copies are compared across workers with an
all-reduce.

Example:

    >>> def model_fn():
    ...   model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    ...   model.compile(optimizer="sgd", loss="mse")
    ...   return model
    >>> def dataset_fn():
    ...   return tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    >>> report = tfdist.verify(model_fn, dataset_fn, strategy="mirrored", steps=5)
    >>> report.agrees, report.first_difference
    (True, None)
"""

import dataclasses
from typing import Callable, List, Optional

import numpy as np
import tensorflow as tf

from tfdist import _keras_support as keras_support
from tfdist._choices import Name
from tfdist import strategies as strategies_lib
from tfdist.internals import tensorflow as tf_internals

DEFAULT_TOLERANCE = 1e-5


@dataclasses.dataclass(frozen=True)
class StepDifference:
  """One step, both sides: the loss before it, and the largest differences (relative)."""

  step: int  # From 1.
  loss: float  # Under the strategy.
  one_device_loss: float
  loss_difference: float
  gradient_difference: float
  weight_difference: float  # After the step.
  replica_difference: float  # Between the replicas' (and workers') copies, after the step.


@dataclasses.dataclass(frozen=True)
class VerifyReport:
  """What `verify` found; `agrees` is False from the `first_difference` on."""

  strategy: str
  replicas: int
  tolerance: float
  steps: List[StepDifference]
  first_difference: Optional[int]  # The first step that differs, or None.
  what: str  # What differs first ("loss", "gradients", "weights", "replicas"), or "".

  @property
  def agrees(self) -> bool:
    """Whether every step agreed within the tolerance."""
    return self.first_difference is None

  def summary(self) -> str:
    """One line: agrees, or the first step and what differs, by how much."""
    if self.agrees:
      return (f"{self.strategy} ({self.replicas} replicas) agrees with one device for "
              f"{len(self.steps)} steps within {self.tolerance:g}")
    step = self.steps[self.first_difference - 1]
    value = {"loss": step.loss_difference, "gradients": step.gradient_difference,
             "weights": step.weight_difference, "replicas": step.replica_difference}[self.what]
    return (f"{self.strategy} ({self.replicas} replicas) differs from one device at step "
            f"{self.first_difference}: {self.what} by {value:.3g} (tolerance {self.tolerance:g}; "
            f"loss {step.loss:.6g} against {step.one_device_loss:.6g})")

  def as_dict(self) -> dict:
    """As JSON-ready data, with `agrees` and `summary()`: what `tfdist verify` writes."""
    return {**dataclasses.asdict(self), "agrees": self.agrees, "summary": self.summary()}


def verify(model_fn: Callable[[], object], dataset_fn: Callable[[], tf.data.Dataset], *,
           strategy=Name.MIRRORED, steps: int = 5, tolerance: float = DEFAULT_TOLERANCE,
           **strategy_options) -> VerifyReport:
  """Trains `model_fn()`'s model under `strategy` and on one device; where they part.

  Args:
    model_fn: returns a compiled Keras model (either Keras), built the same
      way each call; called once under the strategy's scope, once outside.
    dataset_fn: returns a finite or repeated `tf.data.Dataset` of `(x, y)` or
      `(x, y, sample_weight)` batched by the global batch size, the same
      batches in the same order each call (seed any shuffle).
    strategy: a strategy name (`tfdist.make_strategy`) or a strategy.
    steps: training steps to compare.
    tolerance: the largest difference allowed, relative to the largest
      one-device value (absolute below 1).
    **strategy_options: passed to `tfdist.make_strategy` with a name.

  Returns:
    A `VerifyReport`.

  Raises:
    ValueError: `steps` or `tolerance` out of range; the model is not compiled.
  """
  if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
    raise ValueError(f"`steps` must be an integer >= 1. Received: steps={steps!r}")
  if not tolerance > 0:
    raise ValueError(f"`tolerance` must be > 0. Received: tolerance={tolerance!r}")
  name = strategy if isinstance(strategy, str) else type(strategy).__name__
  if isinstance(strategy, str):  # First: multi-worker collectives before any other op.
    strategy = strategies_lib.make_strategy(strategy, **strategy_options)
  with strategy.scope():
    model = model_fn()
  reference = model_fn()
  for built, where in ((model, "under the strategy"), (reference, "on one device")):
    if getattr(built, "optimizer", None) is None:
      raise ValueError(f"`model_fn` must return a compiled model; the one built {where} has "
                       f"no optimizer. Received: {type(built).__name__}")
  reference.set_weights(model.get_weights())
  records = _recorded(model, strategy, dataset_fn, steps, _distributed_gradients(model, strategy))
  one_device = _recorded(reference, None, dataset_fn, steps,
                         lambda batch: _gradients(reference, batch))
  found, what, rows = None, "", []
  for step, (mine, theirs) in enumerate(zip(records, one_device), start=1):
    row = StepDifference(
        step=step, loss=mine["loss"], one_device_loss=theirs["loss"],
        loss_difference=_relative([mine["loss"]], [theirs["loss"]]),
        gradient_difference=_relative(mine["gradients"], theirs["gradients"]),
        weight_difference=_relative(mine["weights"], theirs["weights"]),
        replica_difference=mine["replicas"])
    rows.append(row)
    if found is None:
      for field, label in (("loss_difference", "loss"), ("gradient_difference", "gradients"),
                           ("weight_difference", "weights"), ("replica_difference", "replicas")):
        if not getattr(row, field) <= tolerance:  # NaN differs too.
          found, what = step, label
          break
  return VerifyReport(strategy=name, replicas=strategy.num_replicas_in_sync, tolerance=tolerance,
                      steps=rows, first_difference=found, what=what)


def _recorded(model, strategy, dataset_fn, steps, gradient_fn) -> List[dict]:
  """`steps` steps of the model's own `fit`; before each, its batch's loss and gradients.

  The gradients come from a second reading of the same batches, in step with
  `fit`'s (`strategy` None: one device, the whole global batch).
  """
  batches = iter(dataset_fn() if strategy is None
                 else strategy.experimental_distribute_dataset(dataset_fn()))
  records: List[dict] = []
  library = keras_support.keras_module(keras_support.model_flavour(model))

  class Recorder(library.callbacks.Callback):
    """Records each step's loss and gradients before it, weights after it."""

    def on_train_batch_begin(self, batch, logs=None):
      loss, grads = _restoring_state(model, lambda: gradient_fn(next(batches)))
      records.append({"loss": loss, "gradients": grads})

    def on_train_batch_end(self, batch, logs=None):
      records[-1]["weights"] = model.get_weights()
      records[-1]["replicas"] = 0.0 if strategy is None else _replica_difference(model, strategy)

  model.fit(dataset_fn().take(steps), epochs=1, verbose=0, callbacks=[Recorder()])
  return records


def _relative(values, references) -> float:
  """The largest difference, relative to the largest reference value (absolute below 1)."""
  values = [np.asarray(v, np.float64) for v in values]
  references = [np.asarray(r, np.float64) for r in references]
  scale = max([1.0] + [float(np.abs(r).max()) for r in references if r.size])
  return max([0.0] + [float(np.abs(v - r).max()) for v, r in zip(values, references)
                      if r.size]) / scale


def _unpack(batch):
  x, y = batch[0], batch[1]
  return x, y, batch[2] if len(batch) > 2 else None


def _loss_and_gradients(model, batch):
  """Keras's loss of `batch` (scaled for the replicas, as in `fit`) and its gradients."""
  x, y, sample_weight = _unpack(batch)
  with tf.GradientTape() as tape:
    y_pred = model(x, training=True)
    loss = model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight)
  variables = model.trainable_variables
  grads = [tf.zeros(v.shape, v.dtype) if g is None else tf.convert_to_tensor(g)
           for g, v in zip(tape.gradient(loss, variables), variables)]
  return loss, grads


def _gradients(model, batch):
  loss, grads = _loss_and_gradients(model, batch)
  return float(loss), [g.numpy() for g in grads]


def _distributed_gradients(model, strategy):
  """The strategy's loss and summed gradients of a distributed batch, as its `fit` sums them."""

  def replica_fn(batch):
    loss, grads = _loss_and_gradients(model, batch)
    context = tf.distribute.get_replica_context()
    return context.all_reduce(tf.distribute.ReduceOp.SUM, [loss] + grads)

  @tf.function
  def run(batch):
    return strategy.run(replica_fn, args=(batch,))

  def gradients(batch):
    summed = [strategy.experimental_local_results(t)[0].numpy() for t in run(batch)]
    return float(summed[0]), summed[1:]

  return gradients


def _restoring_state(model, compute):
  """`compute()`, then the model's non-trainable state (moving statistics, seeds) put back."""
  variables = model.non_trainable_variables
  saved = [np.array(v.numpy()) for v in variables]
  try:
    return compute()
  finally:
    for variable, value in zip(variables, saved):
      variable.assign(value)


def _replica_difference(model, strategy) -> float:
  """The largest difference between the copies of a weight that replicas and workers hold."""
  largest = 0.0
  values = []
  for variable in model.weights:
    # Keras 3 variables hold the TF variable whose copies the strategy made.
    variable = variable.value if keras_support.is_keras3_model(model) else variable
    copies = [np.asarray(c) for c in strategy.experimental_local_results(variable)]
    scale = max(1.0, float(np.abs(copies[0]).max()) if copies[0].size else 1.0)
    largest = max([largest] + [float(np.abs(c - copies[0]).max()) / scale
                               for c in copies[1:] if c.size])
    values.append(tf.reshape(tf.cast(copies[0], tf.float32), [-1]))
  if tf_internals.is_multi_worker_mirrored(strategy):
    largest = max(largest, _across_workers(tf.concat(values, 0), strategy))
  return largest


def _across_workers(vector, strategy) -> float:
  """How far any worker's copy is from the workers' mean, summed (0 when all equal)."""

  def replica_fn():
    context = tf.distribute.get_replica_context()
    mean = context.all_reduce(tf.distribute.ReduceOp.MEAN, vector)
    return context.all_reduce(tf.distribute.ReduceOp.SUM, tf.abs(vector - mean))

  spread = strategy.experimental_local_results(strategy.run(tf.function(replica_fn)))[0]
  scale = max(1.0, float(tf.reduce_max(tf.abs(vector))))
  return float(tf.reduce_max(spread)) / scale
