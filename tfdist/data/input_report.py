"""How much of each training step waits for input, and what to do about it.

Keras fetches the next batch inside its compiled step, so waiting cannot be
timed from Python. `InputBoundReport` times Keras's compiled train function
during `fit`, and at each epoch's end times the same function on one cached
batch, which needs no input work: the difference is the wait. Weights and
optimizer state are restored after each probe, so training is unaffected. For custom loops,
`input_wait_share` times `next(iterator)` and the step separately.

Thresholds are the TF profiler's: under 5% fine, 5-20% moderately, 20% or more
highly input-bound.

Example:

    >>> report = InputBoundReport(dataset_fn)
    >>> model.fit(distribute_function(strategy, dataset_fn), callbacks=[report], ...)
    input-bound: 37% of step time waiting for data (highly input-bound: ...)
"""

import logging
import dataclasses
import statistics
import time
from typing import Callable, Iterator, List, Optional

import tensorflow as tf

from tfdist import _keras_support as keras_support
from tfdist.data import distributed_input
from tfdist.internals import keras as keras_internals
from tfdist.internals import tf_keras as tf_keras_internals

logger = logging.getLogger("tfdist")

# None where Keras 3 is installed alone: every model is then a Keras 3 model.
tf_keras = keras_support.optional_tf_keras()


@dataclasses.dataclass(frozen=True)
class InputBound:
  """The measured share of step time spent waiting for input."""

  share: float
  step_ms: float
  compute_ms: float

  @property
  def verdict(self) -> str:
    if self.share < 0.05:
      return "not input-bound"
    if self.share < 0.20:
      return "moderately input-bound"
    return "highly input-bound"

  @property
  def suggestion(self) -> str:
    if self.share < 0.05:
      return "the input pipeline keeps up; nothing to do"
    local = ("use tfdist.data.build (parallel map and prefetch with AUTOTUNE), cache "
             "what is the same every epoch, batch before cheap maps, and use stateless "
             "random ops in augmentation")
    if self.share < 0.20:
      return local
    # Past 20% a trainer's own cores rarely catch up: move the pipeline off them.
    return (f"{local}; if the trainers' cores are busy anyway, run the pipeline on other "
            "machines with TensorFlow's tf.data service: `tfdist launch --data_workers N` "
            "and `tfdist.data.service.distribute(dataset)`")

  def __str__(self) -> str:
    return (f"input-bound: {100 * self.share:.0f}% of step time waiting for data "
            f"({self.verdict}: step {self.step_ms:.2f} ms, of which compute "
            f"{self.compute_ms:.2f} ms; {self.suggestion})")


def _share(step_seconds: float, compute_seconds: float) -> InputBound:
  share = min(1.0, max(0.0, 1.0 - compute_seconds / step_seconds)) if step_seconds else 0.0
  return InputBound(share=share, step_ms=1000 * step_seconds, compute_ms=1000 * compute_seconds)


def input_wait_share(iterator: Iterator, step_fn: Callable, steps: int = 20,
                     warmup: int = 2) -> InputBound:
  """For custom loops: times fetching each batch and running the step, separately.

  Args:
    iterator: yields batches (a dataset or distributed dataset iterator).
    step_fn: runs one step on a batch (e.g. a tf.function calling strategy.run).
    steps: steps to time after `warmup` untimed ones.
  """
  fetch, compute = [], []
  for i in range(warmup + steps):
    start = time.perf_counter()
    batch = next(iterator)
    fetched = time.perf_counter()
    result = step_fn(batch)
    tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, result)
    done = time.perf_counter()
    if i >= warmup:
      fetch.append(fetched - start)
      compute.append(done - fetched)
  compute_seconds = statistics.median(compute)
  return _share(compute_seconds + statistics.median(fetch), compute_seconds)


class InputBoundReport(keras_support.callback_base()):
  """Prints, at the end of `fit`, the share of step time spent waiting for data.

  At the end of each epoch after the first (the first fills caches and
  traces), it times `probe_steps` calls of the compiled step on one cached
  batch, then puts the weights and optimizer state back. Each epoch's share
  compares that epoch's steps with its probe, so both see the machine in the
  same state; the report is the median over epochs (with one epoch, that one).

  Args:
    dataset_fn: the `dataset_fn(input_context)` that feeds `fit` (see
      `tfdist.data.distributed_input.distribute_function`).
    probe_steps: compiled-step calls timed on the cached batch per epoch.
    verbose: print the report at the end of training.

  Attributes:
    result: the `InputBound` measured, or None when not measured (`skipped`).
    skipped: why it was not measured, or None: under parameter servers steps
      run on remote workers, and a model with random layers would have its
      random state changed by the probe.
    per_epoch: the `InputBound` of each measured epoch.
  """

  def __init__(self, dataset_fn: Callable, *, probe_steps: int = 10, verbose: bool = True):
    super().__init__()
    self.dataset_fn = dataset_fn
    self.probe_steps = probe_steps
    self.verbose = verbose
    self.result: Optional[InputBound] = None
    self.per_epoch: List[InputBound] = []

  def on_train_begin(self, logs=None):
    # Time exactly the compiled step Keras calls (fetch included), and nothing of
    # Keras's own per-step Python work, so both timings measure the same thing.
    self._train_function = self.model.train_function
    self._calls = 0
    self._epoch_steps: List[float] = []
    self.per_epoch = []
    self._cached = None
    strategy = self.model.distribute_strategy
    # Not measured where the probe would change training: under parameter
    # servers steps run on remote workers, and a model with random layers
    # (dropout, random augmentation) would see its random ops advanced by the
    # probe's steps, which no state can be rewound for.
    random_layers = [layer.name for layer in _layers(self.model) if _is_random(layer)]
    self.skipped = None
    if isinstance(strategy, tf.distribute.ParameterServerStrategy):
      self.skipped = "steps run on remote workers under parameter servers"
    elif random_layers:
      self.skipped = (f"the model has random layers {random_layers}, whose random state the "
                      "probe's steps would advance; training is left exactly as it would be")
    self._enabled = self.skipped is None
    self._last_epoch = self.params.get("epochs", 1) - 1

    def timed(iterator):
      start = time.perf_counter()
      outputs = self._train_function(iterator)
      self._calls += 1
      if self._calls > 3:  # Leave out tracing and the first steps.
        self._epoch_steps.append(time.perf_counter() - start)
      return outputs

    if self._enabled:
      self.model.train_function = timed

  def on_epoch_end(self, epoch, logs=None):
    steps, self._epoch_steps = self._epoch_steps, []
    if not self._enabled or not steps or (epoch == 0 and self._last_epoch > 0):
      return
    compute = self._time_compute(self.model.distribute_strategy)
    self.per_epoch.append(_share(statistics.median(steps), compute))

  def on_train_end(self, logs=None):
    if self._enabled:
      self.model.train_function = self._train_function
    if self.skipped and self.verbose:
      logger.info("input-bound report: not measured: %s", self.skipped)
    if not self.per_epoch:
      return
    self.result = sorted(self.per_epoch, key=lambda r: r.share)[(len(self.per_epoch) - 1) // 2]
    if self.verbose:
      logger.info("%s", self.result)

  def _time_compute(self, strategy) -> float:
    if self._cached is None:
      def cached_fn(context):
        # Ends in a prefetch like the pipeline it stands in for, so the step
        # pops a ready batch and no cache read is counted as compute.
        return self.dataset_fn(context).take(1).cache().repeat().prefetch(tf.data.AUTOTUNE)
      self._cached = iter(distributed_input.distribute_function(strategy, cached_fn))
    model = self.model
    weights = model.get_weights()
    # The optimizer's variables hold its step count too (learning-rate schedules
    # read it); Keras's own step counter is a variable of the model's.
    optimizer_variables = _optimizer_variables(model.optimizer)
    optimizer_state = [v.numpy() for v in optimizer_variables]
    counter = getattr(model, "_train_counter", None)  # tf_keras's; Keras 3 has none.
    counted = None if counter is None else counter.numpy()
    try:
      train_function = self._train_function
      for _ in range(2):  # Fill the cache and settle.
        train_function(self._cached)
      seconds = []
      for _ in range(self.probe_steps):
        start = time.perf_counter()
        tf.nest.map_structure(lambda t: t.numpy(), train_function(self._cached))
        seconds.append(time.perf_counter() - start)
      return statistics.median(seconds)
    finally:
      model.set_weights(weights)
      for variable, value in zip(optimizer_variables, optimizer_state):
        variable.assign(value)
      if counter is not None:
        counter.assign(counted)


def _layers(model) -> list:
  """Every layer inside `model`, nested ones included, in either Keras."""
  if tf_keras is not None and isinstance(model, tf_keras.Model):
    return [m for m in model.submodules if isinstance(m, tf_keras.layers.Layer)]
  return keras_internals.flatten_layers(model)  # Keras 3: no public recursive list.


def _optimizer_variables(optimizer) -> list:
  variables = optimizer.variables  # A method in tf_keras, a property in Keras 3.
  return list(variables() if callable(variables) else variables)


def _is_random(layer) -> bool:
  """Whether a Keras layer draws random numbers in training (Dropout, RandomFlip, ...)."""
  if tf_keras is not None and isinstance(layer, tf_keras.layers.Layer):
    return tf_keras_internals.is_random_layer(layer)
  import keras  # Keras 3: random layers hold a SeedGenerator.
  return any(isinstance(value, keras.random.SeedGenerator) for value in vars(layer).values())
