"""tfdist.data.distributed_input: shard policies, sizes checked, the explained plan."""

import numpy as np
import pytest
import tensorflow as tf

import tfdist
from tfdist.data import distributed_input as di

Policy = tf.data.experimental.AutoShardPolicy


@pytest.mark.parametrize("files, workers, user, expected", [
    (4, 2, False, Policy.FILE), (2, 2, False, Policy.FILE), (1, 2, False, Policy.DATA),
    (None, 2, False, Policy.DATA), (8, 2, True, Policy.OFF)])
def test_shard_policy(files, workers, user, expected):
  assert di.shard_policy(num_files=files, num_workers=workers, sharded_by_user=user) == expected


def test_explain_file_sharding():
  plan = di.explain(num_elements=1437, global_batch_size=64, num_workers=2,
                    replicas_per_worker=2, num_files=4)
  assert plan.policy == "FILE" and plan.per_replica_batch_size == 16
  assert [s.files for s in plan.workers] == [[0, 2], [1, 3]]
  assert [s.elements for s in plan.workers] == [719, 718]
  assert plan.steps_per_epoch == 22  # 718 // 32 per-worker batch.
  assert plan.elements_dropped == 1437 - 22 * 64
  text = str(plan)
  assert "worker 0: files [0, 2] 719 elements" in text
  assert "global batch       64 = 16 per replica" in text


def test_explain_warns_about_too_few_files_and_uneven_shards():
  plan = di.explain(num_elements=1000, global_batch_size=21, num_workers=3, num_files=2)
  assert plan.policy == "DATA"
  assert any("2 file(s) for 3 workers" in w for w in plan.warnings)
  uneven = di.explain(num_elements=1000, global_batch_size=20, num_workers=2, num_files=2,
                      elements_per_file=[900, 100])
  assert any("uneven shards [900, 100]" in w for w in uneven.warnings)
  assert uneven.steps_per_epoch == 10


@pytest.mark.parametrize("kwargs, match", [
    ({"num_elements": 100, "global_batch_size": 30, "num_workers": 4},
     r"does not split evenly over 4 replicas; use a multiple, e.g. 28"),
    ({"num_elements": 10, "global_batch_size": 64, "num_workers": 2},
     r"Worker 0 gets 5 elements, fewer than its batch of 32.*Received: num_elements=10"),
])
def test_explain_errors(kwargs, match):
  with pytest.raises(ValueError, match=match):
    di.explain(**kwargs)


def test_distribute_dataset_sets_the_policy_and_splits_batches():
  strategy = tfdist.make_strategy("mirrored")
  ds = tf.data.Dataset.from_tensor_slices(np.arange(16, dtype="float32")).batch(8)
  handed = []
  real = strategy.experimental_distribute_dataset
  strategy.experimental_distribute_dataset = lambda d, *a: handed.append(d) or real(d, *a)
  dist = di.distribute_dataset(strategy, ds)
  first = next(iter(dist))
  assert [v.shape[0] for v in strategy.experimental_local_results(first)] == [4, 4]
  # What TF got carries the policy tfdist chose (one dataset, no files: DATA).
  assert handed[0].options().experimental_distribute.auto_shard_policy == Policy.DATA
  files = di.distribute_dataset(strategy, ds, num_files=4)
  assert handed[1].options().experimental_distribute.auto_shard_policy == Policy.FILE
  assert files is not None


def test_distribute_dataset_too_small_for_the_workers():
  spec = tfdist.ClusterSpec.local(workers=2)
  resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
      spec.to_tf(), task_type="worker", task_id=0)

  class TwoWorkers:  # Only what distribute_dataset reads from a strategy.
    cluster_resolver = resolver

  ds = tf.data.Dataset.range(8).batch(8)
  with pytest.raises(ValueError, match=r"1 global batch\(es\) for 2 workers.*Received: 1 "
                     r"batches"):
    di.distribute_dataset(TwoWorkers(), ds)


def test_distribute_function_turns_auto_sharding_off_and_trains():
  strategy = tfdist.make_strategy("mirrored")
  x = np.random.default_rng(0).random((64, 4)).astype("float32")
  y = x.sum(axis=1, keepdims=True)
  seen = []

  def dataset_fn(context):
    seen.append(context.num_replicas_in_sync)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(
        context.get_per_replica_batch_size(16))

  handed = []
  real = strategy.distribute_datasets_from_function
  strategy.distribute_datasets_from_function = lambda fn, *a: real(
      lambda context: handed.append(fn(context)) or handed[-1], *a)

  with strategy.scope():
    model = tfdist.keras.Sequential([tfdist.keras.Input((4,)), tfdist.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
  history = model.fit(di.distribute_function(strategy, dataset_fn), epochs=3,
                      steps_per_epoch=4, verbose=0)
  assert seen == [2]
  assert history.history["loss"][-1] < history.history["loss"][0]
  assert [d.options().experimental_distribute.auto_shard_policy for d in handed] == [Policy.OFF]
