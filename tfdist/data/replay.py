"""Replaying the input: a resumed loop reads on where the interrupted one stopped.

A `tf.data` pipeline with seeded randomness is a pure function of how many
iterators were made over it (each draws the next shuffle order from the
dataset's seed when made, whether it is read or not) and how many batches were
read. So a resumed `fit` makes as many iterators as the interrupted call had,
then skips the batches it had read: the same batches, in the same order, under
every synchronous strategy. TF's own answer, checkpointing the iterator, does
not cover a distributed one (tensorflow/tensorflow#56372, and #24408 for the
multi-device iterator beneath it), which is what every strategy reads from.

What cannot be replayed is named once, before training starts: Python code in
the pipeline (`py_function`, `numpy_function`), an unseeded shuffle or random
op (with no global seed either), a map or interleave that may reorder.
"""

import logging
import time
from typing import Iterable, List

import tensorflow as tf

from tfdist.task import progress
from tfdist.internals import keras as keras_internals
from tfdist.internals import tensorflow as tf_internals

logger = logging.getLogger("tfdist")

_PYTHON_OPS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")
_SHUFFLE_OPS = ("ShuffleDataset", "ShuffleDatasetV2", "ShuffleDatasetV3",
                "ShuffleAndRepeatDataset", "ShuffleAndRepeatDatasetV2")
_STATEFUL_RANDOM_OPS = ("RandomUniform", "RandomUniformInt", "RandomStandardNormal",
                        "TruncatedNormal", "RandomShuffle")
_MAY_REORDER_OPS = ("ParallelMapDatasetV2", "ParallelInterleaveDatasetV2",
                    "ParallelInterleaveDatasetV3", "ParallelInterleaveDatasetV4",
                    "ParallelBatchDataset", "ParallelFilterDataset")


def skip(iterator, batches: int) -> float:
  """Reads and drops `batches` batches of `iterator` (a distributed one too); seconds taken."""
  start = time.monotonic()
  _skip(iterator, tf.constant(batches, tf.int64))
  return time.monotonic() - start


@tf.function
def _skip(iterator, batches):
  for _ in tf.range(batches):
    iterator.get_next()


def not_replayable(dataset) -> List[str]:
  """Why `dataset` (or a `dataset_fn(input_context)`'s) may read differently on a replay.

  An empty list: the pipeline reads the same batches in the same order each
  time it is made, so a resumed job trains on what the interrupted one would have.
  """
  if callable(dataset) and not isinstance(dataset, tf.data.Dataset):
    dataset = dataset(tf.distribute.InputContext())
  if not isinstance(dataset, tf.data.Dataset):
    return []  # A distributed dataset made by the caller: nothing to read.
  graph = tf_internals.dataset_graph(dataset)
  nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
  # Seeds are int64 constants; the other constants are not needed.
  constants = {n.name: tf.make_ndarray(n.attr["value"].tensor) for n in graph.node
               if n.op == "Const" and n.attr["dtype"].type == tf.int64.as_datatype_enum}
  reasons = []
  for node in nodes:
    # The launch's input stamp (tfdist.task.progress) only notes the time: it replays.
    if node.op in _PYTHON_OPS and not node.name.startswith(progress.INPUT_STAMP):
      reasons.append("it runs Python code (tf.py_function or tf.numpy_function), which "
                     "TensorFlow cannot replay; make the step a TensorFlow op, or its "
                     "randomness stateless (tf.random.stateless_*)")
    elif node.op in _SHUFFLE_OPS and _unseeded(node.input[2:4], constants):
      reasons.append("a shuffle has no seed and no global seed is set; pass "
                     "shuffle(..., seed=...) or call keras.utils.set_random_seed first")
    elif node.op in _STATEFUL_RANDOM_OPS and not (node.attr["seed"].i or node.attr["seed2"].i):
      reasons.append(f"a random op ({node.op}) has no seed; use tf.random.stateless_* ops "
                     "with a seed, or set a global seed before building the pipeline")
    elif node.op in _MAY_REORDER_OPS and node.attr["deterministic"].s == b"false":
      reasons.append(f"a parallel step ({node.op}) may reorder its elements "
                     "(deterministic=False); leave `deterministic` at its default")
  return sorted(set(reasons))


def _unseeded(inputs: Iterable[str], constants) -> bool:
  seeds = [constants.get(name.split(":")[0]) for name in inputs]
  return all(seed is not None and int(seed) == 0 for seed in seeds)


def warn_if_not_replayable(dataset, *also: str) -> bool:
  """Logs, once per call, why a resumed job would not read what the interrupted one did.

  Args:
    dataset: the pipeline (or a `dataset_fn`), as `not_replayable` takes it.
    *also: more reasons, known to the caller.

  Returns whether the pipeline can be replayed.
  """
  reasons = sorted(set(not_replayable(dataset)) | set(also))
  if reasons:
    logger.warning(
        "The input pipeline cannot be replayed after an interruption, so a resumed job "
        "would train on other batches than an uninterrupted one: %s.", "; ".join(reasons))
  return not reasons


def read_past(iterator, batches: int) -> None:
  """A resumed fit's input reads past the batches the interrupted run trained on (logged)."""
  seconds = skip(iterator, batches)
  logger.info("BackupAndRestore: the input reads on after the %d batches of this epoch "
              "trained before the backup (read again in %.2fs)", batches, seconds)


def read_on_keras3_fit(callback, epoch: int, batch: int) -> None:
  """From a Keras 3 BackupAndRestore's `on_train_begin`: the running fit reads on after its backup.

  `callback` is the BackupAndRestore, `epoch` the epoch its backup resumes
  (0-based) and `batch` the last one trained in it (-1: none). The epoch's iterator is drawn in the interrupted
  run's order and reads past the batches trained on; a pipeline that cannot be
  replayed is named in a warning, on a fresh start too.
  """
  if epoch or batch >= 0:
    logger.info("BackupAndRestore: resuming at epoch %d, batch %d (from %s)",
                epoch + 1, batch + 2, callback.backup_dir)
  dataset, reason = keras_internals.enable_input_replay(epoch, batch, read_past)
  if dataset is not None:
    warn_if_not_replayable(dataset, *([reason] if reason else []))
