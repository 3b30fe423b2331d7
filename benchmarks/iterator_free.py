"""How long freeing a tf.data iterator blocks, plain and distributed, autotune on and off.

    python benchmarks/iterator_free.py [--rounds=9] [--output=FILE]

Each round makes an iterator, reads from it for 1, 2 or 3 s, and frees it (`del`, the
garbage collector run before, so the free is only the iterator's). Five ways, in one
process, rounds alternated between them:

- `plain`: `iter(dataset)`, tf.data's autotune on (the default);
- `plain, autotune off`: the same dataset with `options.autotune.enabled = False`;
- `distributed`: `MirroredStrategy` over 2 logical CPUs, `experimental_distribute_dataset`;
- `distributed, autotune off`: the same, autotune off on the user's dataset;
- `distributed, freed by a thread`: the distributed iterator's last reference dropped by
  another thread; the time is how long this thread was blocked meanwhile (its longest gap
  between 10 ms sleeps), not how long the free took.

Prints, for each way, how many frees took over half a second, the longest and the sum.
Why a free waits, and how long, is in docs/suite-time.md ("Why in-process tests slowed
down in the suite").
"""

import gc
import json
import os
import threading
import time

from absl import app
from absl import flags

_ROUNDS = flags.DEFINE_integer("rounds", 9, "Iterators freed per way.", lower_bound=1)
_OUTPUT = flags.DEFINE_string("output", None, "Write the results as JSON here.")

WAYS = ("plain", "plain, autotune off", "distributed", "distributed, autotune off",
        "distributed, freed by a thread")


def _blocked_while_a_thread_frees(box: list) -> float:
  """Drops box's one reference on another thread; how long this thread was held up."""
  done = threading.Event()
  threading.Thread(target=lambda: (box.clear(), done.set()), daemon=True).start()
  longest, last = 0.0, time.monotonic()
  while not done.is_set():
    time.sleep(0.01)
    now = time.monotonic()
    longest, last = max(longest, now - last - 0.01), now
  return longest


def main(argv):
  del argv
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tfdist  # pylint: disable=import-outside-toplevel
  tfdist.devices.split_physical_device(2)
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  dataset = tf.data.Dataset.range(10**9).map(lambda x: tf.cast(x, tf.float32)).batch(8)
  options = tf.data.Options()
  options.autotune.enabled = False
  quiet = dataset.with_options(options)
  make = {
      "plain": lambda: iter(dataset),
      "plain, autotune off": lambda: iter(quiet),
      "distributed": lambda: iter(strategy.experimental_distribute_dataset(dataset)),
      "distributed, autotune off": lambda: iter(strategy.experimental_distribute_dataset(quiet)),
      "distributed, freed by a thread":
          lambda: iter(strategy.experimental_distribute_dataset(dataset)),
  }
  frees = {way: [] for way in WAYS}
  for r in range(_ROUNDS.value):
    for way in WAYS:
      iterator = make[way]()
      end = time.monotonic() + 1 + r % 3
      while time.monotonic() < end:
        next(iterator)
      gc.collect()
      if way.endswith("by a thread"):
        box = [iterator]
        del iterator
        frees[way].append(_blocked_while_a_thread_frees(box))
      else:
        start = time.monotonic()
        del iterator
        frees[way].append(time.monotonic() - start)
    print(f"round {r + 1} of {_ROUNDS.value} done", flush=True)
  print(f"{'way':<32} {'frees':>5} {'over 0.5 s':>10} {'longest s':>9} {'sum s':>7}")
  for way in WAYS:
    f = frees[way]
    print(f"{way:<32} {len(f):>5} {sum(s > 0.5 for s in f):>10} {max(f):>9.2f} {sum(f):>7.2f}")
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as out:
      json.dump({way: [round(s, 3) for s in frees[way]] for way in WAYS}, out, indent=1)


if __name__ == "__main__":
  app.run(main)
