"""`SyncRunner`: the loop under synchronous strategies, sums in sync-on-read variables.

Every replica adds its step's sums to variables that sum over every replica
and worker when read, so the sums cross workers once per log, not once per
step; `steps_per_loop` steps run in one `tf.function` call.
"""

import logging
from typing import Dict, Optional, Tuple

import tensorflow as tf

from tfdist.task import progress
from tfdist.data import replay
from tfdist.training.loop import _runner as runner

logger = logging.getLogger("tfdist")


class SyncRunner(runner.Loop):
  """`Loop` under one device, mirrored, central storage and multi-worker mirrored."""

  _checks_sigterm = True

  def __init__(self, *args, **kwargs):
    # kind ("train", "evaluate") -> name -> sync-on-read variable.
    self._sums: Dict[str, Dict[str, tf.Variable]] = {"train": {}, "evaluate": {}}
    self._input_checked = False
    super().__init__(*args, **kwargs)

  def _start_fit(self, dataset, steps_per_epoch: Optional[int],
                 position: Tuple[int, int]) -> None:
    # With steps_per_epoch, one iterator runs on across epochs, as in Keras;
    # without, every epoch is a new pass.
    if not self._input_checked:  # Once per loop, not once per `fit` call.
      self._input_checked = True
      replay.warn_if_not_replayable(dataset)
    self._distributed = self._distribute(dataset)
    iterators, batches = position
    # Each iterator draws its pass's shuffle order when made, read or not: a
    # resumed call makes as many as the interrupted one had, then skips what
    # the newest had read.
    for _ in range(max(1, iterators)):
      self._iterator = iter(self._distributed)
    self.input_iterators.assign(max(1, iterators))
    if batches:
      skipped = replay.skip(self._iterator, batches)
      logger.info("Resumed the input at pass %d, batch %d (%d batches skipped in %.2fs)",
                  max(1, iterators), batches, batches, skipped)
    self._new_pass_each_epoch = steps_per_epoch is None
    if self.local_sgd is not None:
      self.local_sgd.begin()  # The last sync point, from the optimizer's restored iterations.

  def _end_fit(self) -> None:
    # The input's iterators go when `fit` returns, as Keras's do, not whenever the garbage
    # collector frees the loop: freeing a tf.data iterator waits for its autotune thread,
    # which sleeps longer the older the iterator is (docs/known_issues.md, "Freeing a tf.data
    # iterator can block").
    self._iterator = self._distributed = None

  def _train_epoch(self, steps: Optional[int], last: bool) -> Dict[str, float]:
    totals = self._run("train", self._step_fn, self._iterator, steps)
    if self._new_pass_each_epoch and not last:
      self._iterator = iter(self._distributed)  # The next pass.
      self.input_iterators.assign_add(1)
      self.input_batches.assign(0)
    return totals

  def _evaluate(self, dataset, steps: Optional[int]) -> Dict[str, float]:
    return self._run("evaluate", self._eval_step, iter(self._distribute(dataset)), steps)

  def _distribute(self, dataset):
    if isinstance(dataset, tf.distribute.DistributedDataset):
      return dataset
    if callable(dataset) and not isinstance(dataset, tf.data.Dataset):
      return self.strategy.distribute_datasets_from_function(dataset)
    return self.strategy.experimental_distribute_dataset(dataset)

  def _run(self, kind, step_fn, iterator, steps):
    """`steps` steps (None: to the data's end) in loops of `steps_per_loop`; their sums."""
    self._reset_sums(kind)
    done = 0
    while steps is None or done < steps:
      chunk = self.steps_per_loop if steps is None else min(self.steps_per_loop, steps - done)
      if kind == "train" and self.local_sgd is not None:  # A loop ends where a sync falls.
        chunk = min(chunk, self.local_sgd.steps_to_sync())
      ran = self._run_loop(kind, step_fn, iterator, chunk)
      if kind == "train":
        if self.local_sgd is not None:
          self.local_sgd.steps_done()  # Before a checkpoint: it holds the synced weights.
        self.step.assign_add(ran)
        self.input_batches.assign_add(ran)
        progress.step_done(ran)  # For the launcher's stall watchdog.
        if self._checkpoint_every and ran and \
            int(self.step.numpy()) % self._checkpoint_every < ran:
          self._save()
        self._check_sigterm()
      done += ran
      if ran < chunk:
        break  # The data ran out.
    return self._read_sums(kind)

  def _make_function(self, kind, step_fn):
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

  def _run_loop(self, kind, step_fn, iterator, steps):
    function = self._functions.get(kind)
    if function is None:
      # The step's names, from a trace that runs nothing: the sums' variables
      # must exist before the function that adds to them is traced.
      counted = self._counted(step_fn)
      probe = tf.function(lambda it: self.strategy.run(counted, args=(next(it),)))
      self._ensure_sums(kind, sorted(probe.get_concrete_function(iterator).structured_outputs))
      function = self._functions[kind] = self._make_function(kind, step_fn)
    return int(function(iterator, tf.constant(steps, tf.int64)))

  def _read_sums(self, kind) -> Dict[str, float]:
    # Reading a sync-on-read variable sums it over every replica and worker.
    return {name: float(v.read_value()) for name, v in sorted(self._sums[kind].items())}

  def _reset_sums(self, kind):
    for v in self._sums[kind].values():
      v.assign(0.0)
