"""`tfdist explain --workers 2 --devices_per_worker 2 --batch_size 64`

A dry run of distributed input: the shard policy, what each worker receives,
the per-replica and global batch, steps per epoch and what drop_remainder
drops. By default it explains the embedded digits as TFDS shards.
"""

from absl import flags

_WORKERS = flags.DEFINE_integer("workers", 1, "Input pipelines (workers).", lower_bound=1)
_DEVICES_PER_WORKER = flags.DEFINE_integer("devices_per_worker", 1, "Devices per worker, "
                                           "one replica each.", lower_bound=1)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "Global batch size.", lower_bound=1)
_ELEMENTS = flags.DEFINE_integer("num_elements", 1437, "Examples per epoch (default: the "
                                 "digits' train split).", lower_bound=1)
_FILES = flags.DEFINE_integer("num_files", 4, "Files the dataset reads (0: not from files).",
                              lower_bound=0)
_SHARDED = flags.DEFINE_bool("sharded_by_user", False, "The dataset_fn shards itself.")


def main(argv):
  del argv
  from tfdist.data import distributed_input  # Deferred: imports TensorFlow.
  try:
    plan = distributed_input.explain(
        num_elements=_ELEMENTS.value, global_batch_size=_BATCH_SIZE.value,
        num_workers=_WORKERS.value, replicas_per_worker=_DEVICES_PER_WORKER.value,
        num_files=_FILES.value or None, sharded_by_user=_SHARDED.value)
  except ValueError as e:
    print(f"tfdist explain: {e}")
    return 1
  print(plan)
  return 0
