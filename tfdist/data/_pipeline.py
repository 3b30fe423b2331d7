"""Input pipelines in the known-good order, fast by default.

`build(...)` puts a `tf.data.Dataset` through: deterministic preprocessing,
cache, shuffle, repeat, random augmentation (parallel, AUTOTUNE), batch, maps
that work on whole batches (vectorised), prefetch (AUTOTUNE); and applies the
`tf.data.Options` users actually tune, from `PipelineOptions`.

Why this order: the cache keeps the work that is the same every epoch and
nothing random; shuffling after the cache reshuffles cheaply; a map after
batching runs once per batch instead of once per element (many times faster
for a cheap map here; docs/benchmarks/input.md); prefetch overlaps the pipeline
with the training step.

Augmentations should use stateless random ops (`tf.image.stateless_random_*`)
seeded per element (`build(..., augment_seed=)`): the crops then do not depend
on which thread ran first, so a run can be repeated, and TF's automatic
`map_parallelization` (a `.map` written without `num_parallel_calls`)
parallelises only stateless maps. `random_crop_and_flip` is one such map.

Example:

    >>> ds = data.build(data.from_tensors(images, labels), batch_size=64,
    ...                 shuffle_buffer=2048, cache="memory", repeat=True)
"""

import dataclasses
from typing import Callable, Optional, Sequence, Union

import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE


@dataclasses.dataclass(frozen=True)
class PipelineOptions:
  """The tf.data knobs people tune, with TF's defaults unless said otherwise.

  Attributes:
    autotune: let tf.data tune parallelism and buffer sizes (on).
    ram_budget_mb: memory tf.data may use for buffers (None: half of RAM).
    cpu_budget: cores tf.data may plan for (None: all).
    deterministic: keep element order (None: TF's default, which is True).
    map_parallelization: let tf.data parallelise maps it can (on).
    private_threadpool_size: a thread pool for this pipeline only (None: shared).
  """

  autotune: bool = True
  ram_budget_mb: Optional[int] = None
  cpu_budget: Optional[int] = None
  deterministic: Optional[bool] = None
  map_parallelization: bool = True
  private_threadpool_size: Optional[int] = None

  def __post_init__(self):
    for field in ("ram_budget_mb", "cpu_budget", "private_threadpool_size"):
      value = getattr(self, field)
      if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                or value < 1):
        raise ValueError(f"`{field}` must be an integer >= 1, or None. Received: {value!r}")

  def to_tf(self) -> tf.data.Options:
    """These settings as `tf.data.Options`, for `Dataset.with_options`."""
    options = tf.data.Options()
    options.autotune.enabled = self.autotune
    if self.ram_budget_mb is not None:
      options.autotune.ram_budget = self.ram_budget_mb * 1024 * 1024
    if self.cpu_budget is not None:
      options.autotune.cpu_budget = self.cpu_budget
    if self.deterministic is not None:
      options.deterministic = self.deterministic
    options.experimental_optimization.map_parallelization = self.map_parallelization
    if self.private_threadpool_size is not None:
      options.threading.private_threadpool_size = self.private_threadpool_size
    return options


Map = Callable[..., object]


def build(dataset: tf.data.Dataset, *, batch_size: int,
          preprocess: Optional[Map] = None, augment: Optional[Map] = None,
          batch_map: Optional[Map] = None, cache: Union[None, str] = None,
          shuffle_buffer: Optional[int] = None, repeat: bool = False,
          drop_remainder: bool = True, seed: Optional[int] = None,
          augment_seed: Optional[int] = None,
          options: PipelineOptions = PipelineOptions()) -> tf.data.Dataset:
  """The pipeline, in the known-good order.

  Args:
    dataset: elements (e.g. from `from_tensors`, `from_files`, `from_tfds`).
    batch_size: the batch this pipeline yields (per replica, under a strategy).
    preprocess: deterministic per-element map, done once if `cache` is set.
    augment: random per-element map (stateless random ops), done every epoch.
    batch_map: a map over whole batches (vectorised work: normalise, cast, ...).
    cache: None, "memory", or a file path prefix for an on-disk cache.
    shuffle_buffer: elements to shuffle over (None: no shuffle).
    repeat: repeat forever (for `steps_per_epoch` training).
    drop_remainder: drop the last partial batch (static shapes, equal replicas).
    seed: shuffle seed.
    augment_seed: if set, `augment` is called as `augment(element, seed)` with
      an int64 seed of shape [2] per element, for `tf.image.stateless_random_*`:
      a rerun gets the same augmentations, each epoch new ones.
    options: the tf.data options to apply.

  Raises:
    ValueError: a bad batch size, buffer or cache value, or `augment_seed`
      without `augment`.
  """
  if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
    raise ValueError(f"`batch_size` must be an integer >= 1. Received: {batch_size!r}")
  if shuffle_buffer is not None and (not isinstance(shuffle_buffer, int) or shuffle_buffer < 1):
    raise ValueError(f"`shuffle_buffer` must be an integer >= 1, or None. "
                     f"Received: {shuffle_buffer!r}")
  if cache is not None and not isinstance(cache, str):
    raise ValueError("`cache` must be None, 'memory' or a file path prefix. "
                     f"Received: {cache!r}")
  if augment_seed is not None and augment is None:
    raise ValueError("`augment_seed` seeds the `augment` map, and `augment` is not set. "
                     f"Received: augment_seed={augment_seed!r}, augment=None")
  if preprocess is not None:
    dataset = dataset.map(preprocess, num_parallel_calls=AUTOTUNE)
  if cache is not None:
    dataset = dataset.cache("" if cache == "memory" else cache)
  if shuffle_buffer:
    dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
  if repeat:
    dataset = dataset.repeat()
  if augment is not None:
    if augment_seed is not None:
      # Zipped after the shuffle and repeat, so the seeds go with the position
      # in the stream, not the element: new ones every epoch. Dataset.random
      # rather than a counter: measured here, a counter mapped to seed pairs
      # cost 1-5% of a JPEG pipeline's speed (four runs), these 0-0.2%.
      seeds = tf.data.Dataset.random(augment_seed, rerandomize_each_iteration=True).batch(2)
      dataset = tf.data.Dataset.zip((dataset, seeds))
    dataset = dataset.map(augment, num_parallel_calls=AUTOTUNE)
  # Plain batch: measured here, a parallel batch is slower for small elements
  # (x + 1 on 100k scalars: 22x vs 28x the per-element map) and the maps are
  # already parallel (benchmarks/input_pipeline.py).
  dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
  if batch_map is not None:
    dataset = dataset.map(batch_map, num_parallel_calls=AUTOTUNE)
  dataset = dataset.prefetch(AUTOTUNE)
  return dataset.with_options(options.to_tf())


def from_tensors(*arrays) -> tf.data.Dataset:
  """Elements from in-memory arrays, e.g. `from_tensors(images, labels)`."""
  return tf.data.Dataset.from_tensor_slices(arrays if len(arrays) > 1 else arrays[0])


def from_files(files: Union[str, Sequence[str]], *, parse: Optional[Map] = None,
               reader: Callable[[tf.Tensor], tf.data.Dataset] = tf.data.TFRecordDataset,
               shuffle_files: bool = True, seed: Optional[int] = None) -> tf.data.Dataset:
  """Records read from many files at once (parallel interleave), optionally parsed.

  The file list comes first, so a distributed dataset can shard by FILE.

  Raises:
    ValueError: no file matches.
  """
  names = tf.io.gfile.glob(files) if isinstance(files, str) else list(files)
  if not names:
    raise ValueError(f"No file matches `files`. Received: {files!r}")
  dataset = tf.data.Dataset.from_tensor_slices(sorted(names))
  if shuffle_files:
    dataset = dataset.shuffle(len(names), seed=seed)
  dataset = dataset.interleave(reader, cycle_length=min(len(names), 16),
                               num_parallel_calls=AUTOTUNE, deterministic=False)
  if parse is not None:
    dataset = dataset.map(parse, num_parallel_calls=AUTOTUNE)
  return dataset


def from_tfds(name: str, *, split: str, data_dir: str,
              input_context: Optional[tf.distribute.InputContext] = None,
              shuffle_files: bool = True) -> tf.data.Dataset:
  """(features, label) pairs of a prepared TFDS dataset in `data_dir`, offline.

  With `input_context`, each input pipeline reads its own files.
  """
  import tensorflow_datasets as tfds  # Deferred: only this source needs TFDS.
  if name == "tfdist_digits":
    from tfdist.data import tfds_digits
    tfds_digits.prepare(data_dir)  # Writes the shards once; no network either way.
  read_config = tfds.ReadConfig(input_context=input_context, try_autocache=False)
  return tfds.load(name, split=split, data_dir=data_dir, as_supervised=True,
                   shuffle_files=shuffle_files, read_config=read_config, download=False)


def random_crop_and_flip(crop_size: Sequence[int]) -> Map:
  """An `augment` for `build(..., augment_seed=)`: random crop and flip, stateless.

  The map takes ((image, label), seed) and returns (cropped image, label).
  The image is either decoded (height, width, channels), or the bytes of a
  JPEG: then only the crop window is decoded (`tf.io.decode_and_crop_jpeg`,
  to RGB), for less work (measured: 1.4-1.6x fewer CPU-seconds per image on a
  427x640 photo cropped to 256x256). The pixels are those of decoding it all
  and cropping, except, in JPEGs with subsampled colour, the window's first
  and last columns: libjpeg fills in their colour without the pixels beyond
  the window. Images must be at least `crop_size`.

  Raises:
    ValueError: `crop_size` is not two positive integers.
  """
  crop_size = tuple(crop_size)
  if len(crop_size) != 2 or not all(isinstance(n, int) and n > 0 for n in crop_size):
    raise ValueError("`crop_size` must be (height, width), two integers >= 1. "
                     f"Received: {crop_size!r}")

  def augment(element, seed):
    image, label = element
    jpeg = image.dtype == tf.string
    crop = tf.constant(crop_size, tf.int32)
    shape = tf.io.extract_jpeg_shape(image)[:2] if jpeg else tf.shape(image)[:2]
    check = tf.debugging.assert_greater_equal(
        shape, crop, message=f"random_crop_and_flip: an image is smaller than `crop_size` "
        f"{crop_size}; resize it first (e.g. in `preprocess`). Received: x = the image's "
        "(height, width), y = `crop_size`")
    with tf.control_dependencies([check]):
      offset = tf.random.stateless_uniform([2], seed, maxval=tf.int32.max,
                                           dtype=tf.int32) % (shape - crop + 1)
    if jpeg:
      image = tf.io.decode_and_crop_jpeg(image, tf.concat([offset, crop], 0), channels=3)
    else:
      image = tf.slice(image, tf.concat([offset, [0]], 0), tf.concat([crop, [-1]], 0))
    image = tf.ensure_shape(image, crop_size + tuple(image.shape[2:]))
    image = tf.image.stateless_random_flip_left_right(image, seed + 1)
    return image, label

  return augment
