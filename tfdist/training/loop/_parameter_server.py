"""`ParameterServerRunner`: the loop under ParameterServerStrategy, steps as closures.

`fit` takes a `dataset_fn(input_context)` and `steps_per_epoch`, as Keras does;
steps run on the workers through the strategy's `ClusterCoordinator`, which
re-runs a step whose worker was lost, and each closure's sums come back as its
result. Keras 3 trains here too: its variables' `assign_add` is made the atomic
TF op, and a variable sharded over the ps tasks is checkpointed whole
(`tfdist.internals.keras`).
"""

from typing import Dict, Optional

import tensorflow as tf

from tfdist.internals import keras as keras_internals
from tfdist.training.loop import _runner as runner


class ParameterServerRunner(runner.Loop):
  """`Loop` under ParameterServerStrategy."""

  strategy_types = (tf.distribute.ParameterServerStrategy,)

  def __init__(self, *args, **kwargs):
    self._per_worker_datasets = {}  # dataset_fn -> its per-worker dataset
    super().__init__(*args, **kwargs)

  def _prepare_keras(self) -> None:
    if self._keras3:
      # Without the atomic op, workers' concurrent updates of a counter can be lost, and
      # nothing would say so: refused, not trained silently wrong.
      if not keras_internals.enable_atomic_assign_add():
        low, high = (".".join(map(str, v))
                     for v in keras_internals.GATES["atomic_assign_add"].tested)
        raise RuntimeError(
            "Keras 3 under parameter servers needs tfdist's atomic assign_add, which is not "
            f"applied here: {keras_internals.unsupported_reason(patch='atomic_assign_add')}. "
            f"Train with tf_keras (`from tfdist import keras`), or install Keras {low} to "
            f"{high}.")
      keras_internals.enable_sharded_checkpoints()

  def _start_fit(self, dataset, steps_per_epoch: Optional[int], position) -> None:
    del position  # Each closure makes its own iterator on its worker: nothing to replay.
    if steps_per_epoch is None or not callable(dataset):
      raise ValueError(
          "Under ParameterServerStrategy, fit needs `dataset` as a "
          "dataset_fn(input_context) (each worker builds its own) and `steps_per_epoch`. "
          f"Received: dataset={type(dataset).__name__}, steps_per_epoch={steps_per_epoch!r}")
    if steps_per_epoch % self.steps_per_loop:
      raise ValueError(
          "Under ParameterServerStrategy, `steps_per_epoch` must be a multiple of "
          f"`steps_per_loop`. Received: steps_per_epoch={steps_per_epoch}, "
          f"steps_per_loop={self.steps_per_loop}")
    self._dataset_fn = dataset

  def _train_epoch(self, steps: Optional[int], last: bool) -> Dict[str, float]:
    steps -= steps % self.steps_per_loop  # Closures run whole loops.
    totals = self._scheduled("train", self._step_fn, self._dataset_fn, steps)
    self.step.assign_add(steps)
    return totals

  def _evaluate(self, dataset, steps: Optional[int]) -> Dict[str, float]:
    if not callable(dataset) or isinstance(dataset, tf.data.Dataset):
      raise ValueError(
          "Under ParameterServerStrategy, evaluate needs a dataset_fn(input_context): "
          f"each worker builds its own. Received: dataset={type(dataset).__name__}")
    if steps is None:
      return self._exact_evaluate(dataset)
    if steps % self.steps_per_loop:
      raise ValueError(
          "Under ParameterServerStrategy, `steps` must be a multiple of `steps_per_loop`. "
          f"Received: steps={steps}, steps_per_loop={self.steps_per_loop}")
    return self._scheduled("evaluate", self._eval_step, dataset, steps)

  def _function(self, kind, step_fn):
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

  def _scheduled(self, kind, step_fn, dataset_fn, steps):
    """`steps` steps scheduled on the workers, `steps_per_loop` a closure; their sums."""
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(self.strategy)
    if dataset_fn not in self._per_worker_datasets:
      # TF's parameter-server guide: each worker builds its own distributed dataset.
      self._per_worker_datasets[dataset_fn] = coordinator.create_per_worker_dataset(
          tf.function(lambda: self.strategy.distribute_datasets_from_function(dataset_fn)))
    iterator = iter(self._per_worker_datasets[dataset_fn])
    function = self._function(kind, step_fn)
    results = [coordinator.schedule(function, args=(iterator,))
               for _ in range(steps // self.steps_per_loop)]  # fit checks it divides.
    coordinator.join()
    return _summed(results)

  def _exact_evaluate(self, dataset_fn) -> Dict[str, float]:
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(self.strategy)
    shards = runner.EVALUATION_SHARDS
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
    return {name: 0.0 for name in names} | _summed(results)


def _summed(results) -> Dict[str, float]:
  """The closures' sums, fetched and added up."""
  totals: Dict[str, float] = {}
  for result in results:
    for name, value in result.fetch().items():
      totals[name] = totals.get(name, 0.0) + float(value)
  return totals
