"""tfdist.data: the pipeline order, the options, stateless augmentation."""

import numpy as np
import pytest
import tensorflow as tf

from tfdist import data


def test_build_order_and_batches():
  x = np.arange(10, dtype="float32")
  ds = data.build(data.from_tensors(x), batch_size=4, preprocess=lambda v: v * 2,
                  batch_map=lambda b: b + 1, cache="memory")
  assert [b.tolist() for b in ds.as_numpy_iterator()] == [[1, 3, 5, 7], [9, 11, 13, 15]]


def test_cache_keeps_preprocessing_and_not_augmentation():
  calls = tf.Variable(0)

  def preprocess(v):
    calls.assign_add(1)
    return v

  x = np.arange(8, dtype="float32")
  ds = data.build(data.from_tensors(x), batch_size=8, preprocess=preprocess, cache="memory",
                  augment=lambda v: v + tf.random.stateless_uniform([], seed=[1, 2]))
  first, second = [next(iter(ds)).numpy().tolist() for _ in range(2)]
  assert calls.numpy() == 8  # Preprocessing ran once, for the first epoch only.
  assert first == second  # Stateless: the same seed gives the same values.


def test_shuffle_repeat_drop_remainder():
  ds = data.build(data.from_tensors(np.arange(10)), batch_size=4, shuffle_buffer=10,
                  repeat=True, seed=1)
  batches = list(ds.take(5).as_numpy_iterator())
  assert all(b.shape == (4,) for b in batches)
  assert sorted(np.concatenate(batches[:2]).tolist()) != list(range(8))  # Shuffled.


def test_options_reach_tf_data():
  options = data.PipelineOptions(autotune=False, ram_budget_mb=64, cpu_budget=1,
                                 deterministic=False, map_parallelization=False,
                                 private_threadpool_size=2)
  ds = data.build(data.from_tensors(np.arange(4)), batch_size=2, options=options)
  got = ds.options()
  assert got.autotune.enabled is False and got.autotune.ram_budget == 64 * 1024 * 1024
  assert got.autotune.cpu_budget == 1 and got.deterministic is False
  assert got.experimental_optimization.map_parallelization is False
  assert got.threading.private_threadpool_size == 2


@pytest.mark.parametrize("kwargs, match", [
    ({"batch_size": 0}, r"`batch_size` must be an integer >= 1. Received: 0"),
    ({"batch_size": 2, "shuffle_buffer": 0}, r"`shuffle_buffer` must be an integer >= 1"),
    ({"batch_size": 2, "cache": True}, r"`cache` must be None, 'memory' or a file path"),
])
def test_build_errors(kwargs, match):
  with pytest.raises(ValueError, match=match):
    data.build(data.from_tensors(np.arange(4)), **kwargs)


def test_options_errors():
  with pytest.raises(ValueError, match=r"`cpu_budget` must be an integer >= 1, or None. "
                     r"Received: 0"):
    data.PipelineOptions(cpu_budget=0)


def test_from_files_interleaves_every_file(tmp_path):
  for i in range(3):
    with tf.io.TFRecordWriter(str(tmp_path / f"part-{i}.tfrecord")) as writer:
      for j in range(4):
        writer.write(f"{i}-{j}".encode())
  ds = data.from_files(str(tmp_path / "*.tfrecord"), seed=0)
  assert sorted(r.decode() for r in ds.as_numpy_iterator()) == sorted(
      f"{i}-{j}" for i in range(3) for j in range(4))
  with pytest.raises(ValueError, match=r"No file matches `files`. Received: '.*nothing\*'"):
    data.from_files(str(tmp_path / "nothing*"))


def test_augment_images_is_stateless_and_parallel_safe():
  images = np.random.default_rng(0).random((6, 10, 10, 3)).astype("float32")
  ds = data.augment_images(data.from_tensors(images, np.arange(6)), crop_size=(8, 8), seed=3)
  first = [x.numpy() for x, _ in ds]
  again = [x.numpy() for x, _ in ds]
  assert first[0].shape == (8, 8, 3)
  np.testing.assert_array_equal(np.stack(first), np.stack(again))  # Reproducible.
  assert not np.array_equal(first[0], first[1][:, :, :])  # Each element its own seed.
