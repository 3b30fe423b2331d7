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


def _crops(dataset):
  return np.concatenate([images for images, _ in dataset.as_numpy_iterator()])


def test_augment_seed_repeats_across_runs_and_changes_across_epochs():
  images = np.random.default_rng(0).random((6, 10, 10, 3)).astype("float32")

  def pipeline(seed):
    return data.build(data.from_tensors(images, np.arange(6)), batch_size=3,
                      augment=data.random_crop_and_flip((8, 8)), augment_seed=seed)

  ds = pipeline(3)
  epoch1, epoch2 = _crops(ds), _crops(ds)
  assert epoch1.shape == (6, 8, 8, 3)
  np.testing.assert_array_equal(epoch1, _crops(pipeline(3)))  # A rerun: the same crops.
  assert not np.array_equal(epoch1, epoch2)  # A new epoch: new crops.
  assert not np.array_equal(epoch1, _crops(pipeline(4)))
  # Each crop is a window of its own image.
  for crop, image in zip(epoch1, images):
    windows = [image[i:i + 8, j:j + 8] for i in range(3) for j in range(3)]
    assert any(np.array_equal(crop, w) or np.array_equal(crop, w[:, ::-1]) for w in windows)


def test_augment_seed_with_repeat_gives_each_epoch_new_crops():
  images = np.random.default_rng(0).random((4, 10, 10, 3)).astype("float32")
  ds = data.build(data.from_tensors(images, np.arange(4)), batch_size=4, repeat=True,
                  augment=data.random_crop_and_flip((8, 8)), augment_seed=0)
  batches = iter(ds)
  first, second = next(batches)[0].numpy(), next(batches)[0].numpy()
  assert not np.array_equal(first, second)


def test_augment_seed_without_augment_is_an_error():
  with pytest.raises(ValueError, match=r"`augment` is not set. Received: augment_seed=3"):
    data.build(data.from_tensors(np.arange(4)), batch_size=2, augment_seed=3)


def _jpeg(height, width, chroma_downsampling):
  rows, cols = np.mgrid[:height, :width]
  image = np.stack([rows * 4, cols * 3, (rows * cols) % 256], -1).astype("uint8")
  return tf.io.encode_jpeg(image, chroma_downsampling=chroma_downsampling).numpy()


@pytest.mark.parametrize("chroma_downsampling", [False, True])
def test_random_crop_and_flip_decodes_only_the_window_of_a_jpeg(chroma_downsampling):
  jpegs = [_jpeg(40, 60, chroma_downsampling), _jpeg(33, 47, chroma_downsampling)]
  decoded = [tf.io.decode_jpeg(j, channels=3) for j in jpegs]
  augment = data.random_crop_and_flip((24, 32))
  # With subsampled colour, the window's edge columns are coloured without
  # their outside neighbours; every other pixel is the full decode's.
  columns = slice(1, -1) if chroma_downsampling else slice(None)
  for seed in range(20):
    seed = tf.constant([seed, 5], tf.int64)
    for jpeg, image in zip(jpegs, decoded):
      from_jpeg, label = augment((tf.constant(jpeg), 7), seed)
      from_image, _ = augment((image, 7), seed)
      assert from_jpeg.shape == (24, 32, 3) and label == 7
      np.testing.assert_array_equal(from_jpeg[:, columns], from_image[:, columns])
  # In a pipeline, batches keep a static shape for the model.
  ds = data.build(data.from_tensors(jpegs, [0, 1]), batch_size=2, augment=augment,
                  augment_seed=0)
  assert ds.element_spec[0].shape == (2, 24, 32, 3)


def test_random_crop_and_flip_names_an_image_smaller_than_the_crop():
  ds = data.build(data.from_tensors(np.zeros((2, 10, 30, 3), "float32"), [0, 1]),
                  batch_size=2, augment=data.random_crop_and_flip((16, 16)), augment_seed=0)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"smaller than `crop_size` \(16, 16\); resize it first.*Received"):
    next(iter(ds))


@pytest.mark.parametrize("crop_size", [(8,), (8, 0), (8.0, 8)])
def test_random_crop_and_flip_rejects_a_bad_crop_size(crop_size):
  with pytest.raises(ValueError, match=r"`crop_size` must be \(height, width\).*Received: "):
    data.random_crop_and_flip(crop_size)
