"""Distributed input done right: explicit sharding, sizes checked, and a plan you can read.

- `shard_policy`: FILE when there are at least as many files as workers, else
  DATA, OFF when the user shards. Always set explicitly, so TF never falls back
  to AUTO with its "AUTO sharding policy will apply DATA sharding" warning.
- `distribute_dataset`: a globally batched dataset, distributed with that policy,
  after checking every worker gets at least one batch.
- `distribute_function`: a `dataset_fn(input_context)` as the right thing for
  the strategy: `distribute_datasets_from_function` for mirrored and
  multi-worker, a `DatasetCreator` for parameter-server training.
- `explain`: what each worker and replica receives, as a dry run.

Example:

    >>> print(explain(num_elements=1437, global_batch_size=64, num_workers=2,
    ...               replicas_per_worker=2, num_files=4))
"""

import dataclasses
from typing import List, Optional, Sequence

import tensorflow as tf

from tfdist import _keras_support as keras_support
from tfdist.cluster import _spec as spec_lib

Policy = tf.data.experimental.AutoShardPolicy


def shard_policy(*, num_files: Optional[int], num_workers: int,
                 sharded_by_user: bool = False) -> "tf.data.experimental.AutoShardPolicy":
  """The auto-shard policy to set: OFF, FILE or DATA (never AUTO)."""
  if sharded_by_user:
    return Policy.OFF
  if num_files is not None and num_files >= num_workers:
    return Policy.FILE
  return Policy.DATA


def _num_workers(strategy: tf.distribute.Strategy) -> int:
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None:
    return 1
  return max(1, spec_lib.count_workers(resolver.cluster_spec().as_dict()))


@dataclasses.dataclass(frozen=True)
class WorkerShare:
  worker: int
  files: Optional[List[int]]  # File indices (FILE policy), else None.
  elements: int


@dataclasses.dataclass(frozen=True)
class InputPlan:
  """What every worker and replica receives in one epoch."""

  policy: str
  num_workers: int
  replicas_per_worker: int
  global_batch_size: int
  per_replica_batch_size: int
  steps_per_epoch: int
  elements_dropped: int
  workers: List[WorkerShare]
  warnings: List[str]

  def __str__(self) -> str:
    lines = [
        f"shard policy       {self.policy}",
        f"workers x replicas {self.num_workers} x {self.replicas_per_worker} = "
        f"{self.num_workers * self.replicas_per_worker} replicas",
        f"global batch       {self.global_batch_size} = {self.per_replica_batch_size} per replica",
        f"steps per epoch    {self.steps_per_epoch}",
        f"dropped per epoch  {self.elements_dropped} elements (drop_remainder and uneven shards)",
    ]
    for share in self.workers:
      files = f" files {share.files}" if share.files is not None else ""
      per_replica = share.elements // self.replicas_per_worker
      lines.append(f"  worker {share.worker}:{files} {share.elements} elements, about "
                   f"{per_replica} per replica")
    lines += [f"warning: {w}" for w in self.warnings]
    return "\n".join(lines)


def explain(*, num_elements: int, global_batch_size: int, num_workers: int = 1,
            replicas_per_worker: int = 1, num_files: Optional[int] = None,
            elements_per_file: Optional[Sequence[int]] = None,
            sharded_by_user: bool = False) -> InputPlan:
  """A dry run of distributed input: who gets what, and how many steps.

  Args:
    num_elements: examples in one epoch of the whole dataset.
    global_batch_size: examples per step across all replicas.
    num_workers: input pipelines (one per worker).
    replicas_per_worker: devices per worker.
    num_files: files the dataset reads, if it reads files.
    elements_per_file: examples in each file (default: spread evenly).
    sharded_by_user: the dataset_fn shards itself (policy OFF).

  Raises:
    ValueError: the batch does not split across replicas, or some worker would
      not get a single batch.
  """
  replicas = num_workers * replicas_per_worker
  if global_batch_size % replicas:
    raise ValueError(
        f"`global_batch_size` {global_batch_size} does not split evenly over {replicas} "
        f"replicas; use a multiple, e.g. {replicas * max(1, global_batch_size // replicas)}. "
        f"Received: global_batch_size={global_batch_size}")
  policy = shard_policy(num_files=num_files, num_workers=num_workers,
                        sharded_by_user=sharded_by_user)
  warnings = []
  if policy == Policy.FILE:
    sizes = list(elements_per_file) if elements_per_file else [
        num_elements // num_files + (1 if i < num_elements % num_files else 0)
        for i in range(num_files)]
    shares = [WorkerShare(w, list(range(w, num_files, num_workers)),
                          sum(sizes[w::num_workers])) for w in range(num_workers)]
  else:
    shares = [WorkerShare(w, None, num_elements // num_workers +
                          (1 if w < num_elements % num_workers else 0))
              for w in range(num_workers)]
    if num_files is not None and num_workers > 1:
      warnings.append(f"{num_files} file(s) for {num_workers} workers: sharding by DATA, so "
                      "every worker reads every file and keeps 1/"
                      f"{num_workers} of the elements. Write at least {num_workers} files.")
  per_worker_batch = global_batch_size // num_workers
  steps = min(s.elements // per_worker_batch for s in shares)
  if steps == 0:
    smallest = min(shares, key=lambda s: s.elements)
    raise ValueError(
        f"Worker {smallest.worker} gets {smallest.elements} elements, fewer than its batch "
        f"of {per_worker_batch} ({global_batch_size} global / {num_workers} workers): it "
        "could not run a single step. Use a smaller batch or more data. "
        f"Received: num_elements={num_elements}, global_batch_size={global_batch_size}")
  counts = [s.elements for s in shares]
  if max(counts) - min(counts) >= per_worker_batch:
    warnings.append(f"uneven shards {counts}: every worker stops after the smallest "
                    f"shard's {steps} steps; the rest of the larger shards is unused.")
  return InputPlan(
      policy=policy.name, num_workers=num_workers, replicas_per_worker=replicas_per_worker,
      global_batch_size=global_batch_size,
      per_replica_batch_size=global_batch_size // replicas, steps_per_epoch=steps,
      elements_dropped=num_elements - steps * global_batch_size, workers=shares,
      warnings=warnings)


def with_shard_policy(dataset: tf.data.Dataset, policy) -> tf.data.Dataset:
  """`dataset` with tf.data's auto-shard policy set: what the strategy reads when it shards."""
  options = tf.data.Options()
  options.experimental_distribute.auto_shard_policy = policy
  return dataset.with_options(options)


def distribute_dataset(strategy: tf.distribute.Strategy, dataset: tf.data.Dataset, *,
                       num_files: Optional[int] = None, sharded_by_user: bool = False):
  """A globally batched `dataset`, distributed with an explicit shard policy.

  Raises:
    ValueError: the dataset's (known) size cannot give every worker a batch.
  """
  num_workers = _num_workers(strategy)
  policy = shard_policy(num_files=num_files, num_workers=num_workers,
                        sharded_by_user=sharded_by_user)
  dataset = with_shard_policy(dataset, policy)
  batches = int(dataset.cardinality())
  if batches >= 0 and batches < num_workers:
    raise ValueError(
        f"The dataset has {batches} global batch(es) for {num_workers} workers: some "
        "worker would get none and every other worker would wait for it. Use a smaller "
        f"batch or more data. Received: {batches} batches")
  return strategy.experimental_distribute_dataset(dataset)


def distribute_function(strategy: tf.distribute.Strategy, dataset_fn):
  """What `model.fit` takes for a `dataset_fn(input_context)` under `strategy`.

  The function shards by `input_context.input_pipeline_id` and batches with
  `input_context.get_per_replica_batch_size(global_batch_size)` itself.
  """
  def unsharded(input_context):
    # The function shards itself: tell tf.data, so it neither shards nor warns.
    return with_shard_policy(dataset_fn(input_context), Policy.OFF)

  if isinstance(strategy, tf.distribute.ParameterServerStrategy):
    # Deferred: only a tf_keras fit's parameter-server input needs it.
    tf_keras = keras_support.require_tf_keras("parameter-server input for fit (DatasetCreator)")
    return tf_keras.utils.experimental.DatasetCreator(unsharded)
  return strategy.distribute_datasets_from_function(unsharded)
