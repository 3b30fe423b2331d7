"""Input-pipeline benchmark: naive vs hand-tuned vs AUTOTUNE vs tfdist, side by side.

    python benchmarks/input_pipeline.py [--repeats 6] [--images 2048] [--output results.json]

Workloads, each run in this one process with the variants interleaved (in
forward then reverse order, so a drift in the machine's speed hits them alike);
ratios are medians of the per-repeat ratios:

- image: JPEG decode, random crop, flip and resize to 64x64, batch 32, on the
  two real photos that ship with scikit-learn (repeated to `--images`), as
  naive, TF defaults, a grid of hand-tuned settings, plain AUTOTUNE, tfdist
  (stateless ops seeded per element, and the resize done on whole batches) and
  tfdist given the others' per-element stateful map;
- cheap: `x + 1` on 100k scalars, batch 1024 (per element, or per batch);
- input wait: the share of a small CNN's step spent waiting for data when fed
  by the tfdist pipeline (tfdist.input_report).

Prints images/s and ratios and writes one JSON key per ratio. Not a test: it
never fails on speed.
"""

import json
import os
import re
import statistics
import time

from absl import app
from absl import flags

_REPEATS = flags.DEFINE_integer("repeats", 6, "Interleaved repeats per variant.", lower_bound=1)
# 2048: a pass of 512 (0.6 s) was short enough for pipeline start-up to swing
# the ratios by 10%.
_IMAGES = flags.DEFINE_integer("images", 2048, "JPEGs per pass.", lower_bound=32)
_OUTPUT = flags.DEFINE_string("output", None, "Write the results as JSON here.")

CROP = (256, 256)
SIZE = (64, 64)
# (map threads, prefetch batches): the cores, and twice the cores deeper.
HAND_TUNED = ((os.cpu_count(), 2), (2 * os.cpu_count(), 4))


def _jpegs(count):
  import sklearn
  folder = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "images")
  photos = []
  for name in ("china.jpg", "flower.jpg"):
    with open(os.path.join(folder, name), "rb") as f:
      photos.append(f.read())
  return [photos[i % 2] for i in range(count)]


def image_variants(tf, data, jpegs):
  """name -> function building a fresh dataset of batches for one pass."""
  # One tensor, made once: from_tensor_slices over Python bytes copies them all.
  jpegs = tf.constant(jpegs)
  def stateful(jpeg):  # What most tutorials write: stateful random ops.
    image = tf.io.decode_jpeg(jpeg, channels=3)
    image = tf.image.random_crop(image, CROP + (3,))
    image = tf.image.random_flip_left_right(image)
    return tf.image.resize(image, SIZE)

  def stateless(element, seed):  # The resize comes after batching: crops are one size.
    image = tf.io.decode_jpeg(element, channels=3)
    image = tf.image.stateless_random_crop(image, CROP + (3,), seed)
    return tf.image.stateless_random_flip_left_right(image, seed + 1)

  def source():
    return tf.data.Dataset.from_tensor_slices(jpegs)

  return {
      "naive": lambda: source().map(stateful).batch(32),
      "tf defaults": lambda: source().map(stateful, num_parallel_calls=None).batch(32)
      .prefetch(tf.data.AUTOTUNE),
      # What users tune by hand: map threads and prefetch depth.
      **{f"hand-tuned {threads}/{depth}":
         (lambda threads=threads, depth=depth: source().map(stateful, num_parallel_calls=threads)
          .batch(32).prefetch(depth))
         for threads, depth in HAND_TUNED},
      "autotune": lambda: source().map(stateful, num_parallel_calls=tf.data.AUTOTUNE)
      .batch(32).prefetch(tf.data.AUTOTUNE),
      "tfdist": lambda: data.build(source(), batch_size=32, augment=stateless, augment_seed=7,
                                   batch_map=lambda images: tf.image.resize(images, SIZE)),
      # The same pipeline with the others' stateful map: what the pipeline
      # costs, apart from the per-element seeds that make augmentation repeatable.
      "tfdist, stateful map": lambda: data.build(source(), batch_size=32, augment=stateful),
  }


def cheap_variants(tf, data):
  values = tf.range(100_000, dtype=tf.float32)
  return {
      "naive": lambda: tf.data.Dataset.from_tensor_slices(values).map(lambda x: x + 1)
      .batch(1024),
      "tfdist": lambda: data.build(tf.data.Dataset.from_tensor_slices(values),
                                   batch_size=1024, drop_remainder=False,
                                   batch_map=lambda b: b + 1),
  }


def _pass(make, count):
  dataset = make()  # Building the pipeline is not part of running it.
  start = time.perf_counter()
  for _ in dataset:
    pass
  return count / (time.perf_counter() - start)


def measure(variants, count, repeats):
  """Elements/s per variant and repeat, interleaved (one warm-up pass each).

  Odd repeats run the variants in reverse order, so a variant does not always
  follow the same one and a steady drift cancels out.
  """
  for make in variants.values():
    _pass(make, count)
  names = list(variants)
  rates = {name: [] for name in names}
  for repeat in range(repeats):
    for name in (names if repeat % 2 == 0 else names[::-1]):
      rates[name].append(_pass(variants[name], count))
  return rates


def ratio(rates, a, b):
  """Median over repeats of a's rate / b's rate in the same repeat."""
  return statistics.median(x / y for x, y in zip(rates[a], rates[b]))


def cnn_input_wait(tf):
  import tfdist
  from tfdist import data, datasets, distributed_input, input_report, keras
  (x, y), _ = datasets.load_digits()

  def dataset_fn(context):
    return data.build(data.from_tensors(x, y), batch_size=64, cache="memory",
                      shuffle_buffer=len(x), repeat=True)

  strategy = tfdist.make_strategy("one_device")
  with strategy.scope():
    from tfdist import training
    model = training.small_cnn()
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
  report = input_report.InputBoundReport(dataset_fn, verbose=False)
  model.fit(distributed_input.distribute_function(strategy, dataset_fn), epochs=3,
            steps_per_epoch=50, verbose=0, callbacks=[report])
  return report.result


def main(argv):
  del argv
  import tensorflow as tf
  from tfdist import data
  jpegs = _jpegs(_IMAGES.value)
  image = measure(image_variants(tf, data, jpegs), len(jpegs), _REPEATS.value)
  cheap = measure(cheap_variants(tf, data), 100_000, _REPEATS.value)
  wait = cnn_input_wait(tf)
  hand_tuned = [name for name in image if name.startswith("hand-tuned")]
  best_hand = max(hand_tuned, key=lambda name: statistics.median(image[name]))
  results = {
      "image_per_second": {name: statistics.median(r) for name, r in image.items()},
      "cheap_per_second": {name: statistics.median(r) for name, r in cheap.items()},
      **{f"image_{re.sub('[^a-z0-9]+', '_', name)}_vs_naive": ratio(image, name, "naive")
         for name in image if name != "naive"},
      "image_best_hand_tuned": best_hand,
      "image_tfdist_vs_best_hand_tuned": ratio(image, "tfdist", best_hand),
      "image_tfdist_vs_autotune": ratio(image, "tfdist", "autotune"),
      "image_tfdist_stateful_map_vs_best_hand_tuned":
          ratio(image, "tfdist, stateful map", best_hand),
      "cheap_tfdist_vs_naive": ratio(cheap, "tfdist", "naive"),
      "cnn_input_wait_share": wait.share,
      "repeats": _REPEATS.value,
      "cores": os.cpu_count(),
  }
  print(f"image workload (decode, crop, flip, resize; {len(jpegs)} JPEGs, medians of "
        f"{_REPEATS.value} interleaved runs; hand-tuned threads/prefetch):")
  for name, rate in results["image_per_second"].items():
    print(f"  {name:20} {rate:8.0f} images/s  {ratio(image, name, 'naive'):.2f}x naive")
  print(f"  tfdist vs the best hand-tuned ({best_hand}): "
        f"{results['image_tfdist_vs_best_hand_tuned']:.3f}x; vs plain AUTOTUNE: "
        f"{results['image_tfdist_vs_autotune']:.3f}x; with the stateful map vs the best "
        f"hand-tuned: {results['image_tfdist_stateful_map_vs_best_hand_tuned']:.3f}x")
  print("cheap workload (x + 1 on 100k elements):")
  for name, rate in results["cheap_per_second"].items():
    print(f"  {name:20} {rate:10.0f} elements/s  {ratio(cheap, name, 'naive'):.1f}x naive")
  print(f"small CNN fed by the tfdist pipeline: {wait}")
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump(results, f, indent=1)
  return 0


if __name__ == "__main__":
  app.run(main)
