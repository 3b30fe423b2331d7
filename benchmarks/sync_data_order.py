"""Why multi-worker mirrored ends at another accuracy than one device: the global batches.

    python benchmarks/sync_data_order.py [--output=F]

`tfdist compare` shows the single-machine strategies at the one-device
accuracy and multi_worker_mirrored a point or so away. Synchronous training
computes the whole global batch's update, so the difference must come from the
batches themselves: under two workers each reads its own shard of the training
set, shuffled on its own, and a global batch is half from each. This trains
the default job three ways and prints the test accuracies:

- one device, reading the training set in its own shuffled order;
- one device, fed exactly the global batches the two workers read (the job's
  `make_dataset_fn` for input pipelines 0 and 1 of 2, zipped and concatenated);
- `tfdist train --strategy=multi_worker_mirrored` (a local 2-worker cluster).

If the second equals the third, the accuracy difference is the data order, not
synchronous training across machines.
"""

import json
import os
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

_OUTPUT = flags.DEFINE_string("output", None, "Also write the results here, as JSON.")

BATCH = 64  # tfdist train's default global batch.


def _accuracy(export_path, x_test, y_test):
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  signature = tf.saved_model.load(export_path).signatures["serving_default"]
  (logits,) = signature(tf.constant(x_test)).values()
  return float(np.mean(np.argmax(logits.numpy(), axis=1) == y_test))


def main(argv):
  del argv
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from tfdist.data import digits  # pylint: disable=import-outside-toplevel
  from tfdist.training import job  # pylint: disable=import-outside-toplevel

  (x_train, y_train), (x_test, y_test) = digits.load_digits()
  shard_fn = job.make_dataset_fn(x_train, y_train, BATCH, job.TrainConfig().seed)

  def two_workers_batches(_):
    # Worker i reads shard i, shuffled, BATCH / 2 a step; a global batch is both halves.
    shards = [shard_fn(tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=i,
                                                  num_replicas_in_sync=2)) for i in range(2)]
    return tf.data.Dataset.zip(tuple(shards)).map(
        lambda a, b: (tf.concat([a[0], b[0]], 0), tf.concat([a[1], b[1]], 0)))

  results = {}
  for name, dataset_fn in (("one_device", None),
                           ("one_device_fed_two_workers_batches", two_workers_batches)):
    config = job.TrainConfig(strategy="one_device", verbose=0, export_dir=tempfile.mkdtemp(),
                             dataset_fn=dataset_fn,
                             steps_per_epoch=len(x_train) // BATCH if dataset_fn else None)
    results[name] = _accuracy(job.train(config).export_path, x_test, y_test)
  out = os.path.join(tempfile.mkdtemp(), "mwms.json")
  subprocess.run([sys.executable, "-m", "tfdist", "train", "--strategy=multi_worker_mirrored",
                  "--verbose=0", f"--output={out}"], check=True, timeout=900)
  with open(out) as f:
    results["multi_worker_mirrored"] = json.load(f)["accuracy"]
  for name, accuracy in results.items():
    print(f"{name:36s} test accuracy {accuracy:.3f} ({round(accuracy * len(y_test))} of "
          f"{len(y_test)})")
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump(results, f, indent=2)


if __name__ == "__main__":
  app.run(main)
