"""Folders a job makes for itself (backups, checkpoints, exports, logs): its user's only.

A backup or a checkpoint holds the model, and TensorFlow restores what it finds
there: a folder other users can read leaks the model, and one they can write
lets them swap what the job restores. So each folder tfdist makes on a local or
shared file system gets mode 0700 (what TensorFlow writes inside it is then
out of others' reach too). Folders that exist already keep their mode: the user
chose it. On object stores (`gs://`, `s3://`, `hdfs://`) access is the
bucket's, and TensorFlow's own `tf.io.gfile.makedirs` makes them.

Example:

    >>> folders.makedirs("/scratch/me/run-1/backup")  # each missing one: drwx------
"""

import os

PRIVATE_MODE = 0o700


def makedirs(path: str) -> None:
  """Makes `path` and its missing parents, each one it makes readable by its user only.

  Exists-ok, also when the workers of a job make the same folders at once.
  """
  if "://" in path:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel  Only for object stores.
    tf.io.gfile.makedirs(path)
    return
  missing, folder = [], os.path.abspath(path)
  while not os.path.isdir(folder) and folder != os.path.dirname(folder):
    missing.append(folder)
    folder = os.path.dirname(folder)
  for folder in reversed(missing):
    try:
      os.mkdir(folder, PRIVATE_MODE)
    except FileExistsError:
      if not os.path.isdir(folder):
        raise
