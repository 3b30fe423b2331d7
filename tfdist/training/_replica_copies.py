"""Each replica's own copies of mirrored variables, kept by its task beside a checkpoint.

A checkpoint of a mirrored variable holds one copy, the first replica's, and a
restore gives it to every replica: right for variables every replica holds
alike, not for those that differ between them (local SGD's weights between
syncs, each replica's optimizer state). Every task writes its local replicas'
copies of such variables into a folder of its own beside the checkpoint
(`local_sgd_replicas/worker-1`), one file per step, and reads its own back
after the checkpoint is restored.

Example:

    >>> replica_copies.write(strategy, variables, backup_dir, step)  # before the backup
    >>> replica_copies.read(strategy, variables, backup_dir, step)   # after its restore
"""

import logging
import os
import re
from typing import Sequence

from tfdist.internals import tensorflow as tf_internals

logger = logging.getLogger("tfdist")

FOLDER = "local_sgd_replicas"
_FILE = re.compile(r"^replicas-(\d+)\.index$")
# Files kept: the newest, and the one before it, which matches the last complete
# checkpoint while the next one is being written.
_KEEP = 2


def _folder(strategy, directory: str) -> str:
  return tf_internals.task_dirpath(os.path.join(directory, FOLDER), strategy)


def _checkpoint(strategy, variables: Sequence):
  """The local replicas' copies of `variables` (TF variables), one list per replica."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  copies = [strategy.experimental_local_results(v) for v in variables]
  return tf.train.Checkpoint(replicas=[list(replica) for replica in zip(*copies)])


def write(strategy, variables: Sequence, directory: str, step: int) -> None:
  """Writes this task's replicas' copies of `variables` for `step`; call it before the checkpoint.

  Files of later steps go: they belong to saves that never completed into a
  checkpoint (a job resumed from an older one). Of the rest, the two newest
  stay: if the task stops while the checkpoint is written, the one matching
  the checkpoint before is still there.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  folder = _folder(strategy, directory)
  tf.io.gfile.makedirs(folder)
  _checkpoint(strategy, variables).write(os.path.join(folder, f"replicas-{step}"))
  steps = sorted(int(m.group(1)) for m in map(_FILE.match, tf.io.gfile.listdir(folder)) if m)
  kept = [s for s in steps if s <= step][-_KEEP:]
  for old in steps:
    if old not in kept:
      for name in tf.io.gfile.glob(os.path.join(folder, f"replicas-{old}.*")):
        tf.io.gfile.remove(name)


def read(strategy, variables: Sequence, directory: str, step: int) -> bool:
  """Puts this task's replicas' copies for `step` back; whether it did (else a warning).

  Copies missing, or saved by another number of replicas on this task (a job
  resumed on more or fewer devices), are a warning, and nothing is assigned:
  every replica goes on from the checkpoint's (the first replica's) values.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = os.path.join(_folder(strategy, directory), f"replicas-{step}")
  if not tf.io.gfile.exists(path + ".index"):
    logger.warning("No copy of this task's replicas at step %d in %s: every replica resumes "
                   "from the first replica's weights and optimizer state", step,
                   os.path.dirname(path))
    return False
  saved, now = _replicas_in(path), len(strategy.extended.worker_devices)
  if saved != now:  # Checked before anything is assigned.
    logger.warning("This task's replicas' copies at step %d in %s were saved by %d replicas, "
                   "and it has %d now: every replica resumes from the first replica's weights "
                   "and optimizer state", step, os.path.dirname(path), saved, now)
    return False
  _checkpoint(strategy, variables).read(path).assert_consumed()
  return True


def _replicas_in(path: str) -> int:
  """How many replicas' copies the file at `path` holds (its keys: `replicas/<i>/...`)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return len({name.split("/")[1] for name, _ in tf.train.list_variables(path)
              if name.startswith("replicas/")})


def remove(strategy, directory: str) -> None:
  """Removes this task's copies beside `directory` (when its checkpoint is deleted).

  The shared folder goes too once it is empty: each task removes its own
  first, so the last to look finds it empty.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  folder = _folder(strategy, directory)
  if tf.io.gfile.exists(folder):
    tf.io.gfile.rmtree(folder)
  shared = os.path.dirname(folder)
  try:
    if not tf.io.gfile.listdir(shared):
      tf.io.gfile.rmtree(shared)
  except tf.errors.NotFoundError:
    pass  # Gone already (another task removed it).
