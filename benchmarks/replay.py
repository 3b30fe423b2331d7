"""What exact resume costs: replaying the input at a restart, against training steps.

    python benchmarks/replay.py [--strategy=mirrored] [--batches=100] [--repeats=5]

Trains the default job's CNN (`tfdist train`'s small_cnn) on the embedded
digits with `tfdist.training.loop` under `--strategy` (two logical CPUs), on a
pipeline shuffled with a seed and reshuffled every pass, then times, side by
side and `--repeats` times each: `--batches` training steps, and skipping
`--batches` batches of the same distributed pipeline as a resumed `fit` does
(`tfdist.data.replay.skip`). It prints the medians and their ratio:
the share of a step's time a restart spends per batch it replays. It also
times a checkpoint with and without the two input counters.
"""

import statistics
import tempfile
import time

from absl import app
from absl import flags

_STRATEGY = flags.DEFINE_enum("strategy", "mirrored", ["one_device", "mirrored"],
                              "The strategy, over two logical CPUs.")
_BATCHES = flags.DEFINE_integer("batches", 100, "Steps trained, and batches skipped, per run.",
                                lower_bound=1)
_REPEATS = flags.DEFINE_integer("repeats", 5, "Runs of each, alternated.", lower_bound=1)


def main(argv):
  del argv
  import tfdist
  tfdist.devices.split_physical_device(2)
  import tensorflow as tf
  from tfdist import keras
  from tfdist.data import digits
  from tfdist.training import job
  from tfdist.training import loop as loop_lib
  from tfdist.data import replay

  strategy = tfdist.make_strategy(_STRATEGY.value)
  (x, y), _ = digits.load_digits()

  def dataset():
    return (tf.data.Dataset.from_tensor_slices((x, y))
            .shuffle(len(x), seed=7, reshuffle_each_iteration=True).repeat().batch(64))

  keras.utils.set_random_seed(0)
  with strategy.scope():
    model = job.small_cnn()
    optimizer = keras.optimizers.SGD(0.05)
  checkpoint_dir = tempfile.mkdtemp(prefix="replay-bench-")
  loop = loop_lib.Loop(strategy, model, loss=keras.losses.SparseCategoricalCrossentropy(),
                       optimizer=optimizer, checkpoint_dir=checkpoint_dir)
  loop.fit(dataset(), epochs=1, steps_per_epoch=10, verbose=False)  # Traced and warm.
  distributed = strategy.experimental_distribute_dataset(dataset())
  replay.skip(iter(distributed), 10)  # Traced and warm.
  steps, skips = [], []
  for _ in range(_REPEATS.value):
    start = time.monotonic()
    loop.fit(dataset(), epochs=int(loop.epoch.numpy()) + 1, steps_per_epoch=_BATCHES.value,
             verbose=False)
    steps.append((time.monotonic() - start) / _BATCHES.value)
    skips.append(replay.skip(iter(distributed), _BATCHES.value) / _BATCHES.value)
  checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
  with_counters = tf.train.Checkpoint(model=model, optimizer=optimizer, step=loop.step,
                                      epoch=loop.epoch, input_iterators=loop.input_iterators,
                                      input_batches=loop.input_batches)
  saves = {"without": [], "with": []}
  for _ in range(_REPEATS.value):
    for name, ckpt in (("without", checkpoint), ("with", with_counters)):
      start = time.monotonic()
      ckpt.write(f"{checkpoint_dir}/{name}")
      saves[name].append(time.monotonic() - start)
  step, skip = statistics.median(steps), statistics.median(skips)
  print(f"{_STRATEGY.value}, small_cnn on the digits, global batch 64, medians of "
        f"{_REPEATS.value} runs of {_BATCHES.value}:")
  print(f"  training step        {step * 1000:8.2f} ms")
  print(f"  replayed batch       {skip * 1000:8.2f} ms  ({skip / step:.2f}x a step)")
  print(f"  checkpoint           {statistics.median(saves['without']) * 1000:8.2f} ms without "
        f"the input counters, {statistics.median(saves['with']) * 1000:.2f} ms with them")


if __name__ == "__main__":
  app.run(main)
