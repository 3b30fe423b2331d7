"""Folders a job makes for itself (backups, checkpoints, exports, logs): its user's only.

A backup or a checkpoint holds the model, and TensorFlow restores what it finds
there: a folder other users can read leaks the model, and one they can write
lets them swap what the job restores. So each folder tfdist makes on a local or
shared file system gets mode 0700 (what TensorFlow writes inside it is then
out of others' reach too). Folders that exist already keep their mode: the user
chose it. On object stores (`gs://`, `s3://`, `hdfs://`) access is the
bucket's, and TensorFlow's own `tf.io.gfile.makedirs` makes them.

The folders a launch keeps for a while in the temporary directory (the tasks'
records, their progress) are removed in a `finally`; a process SIGKILLed (the
OOM killer, `kill -9`, an actor Ray kills) runs none. `remove_when_gone`
starts a small detached process that removes them once their maker has gone;
`temporary` makes such a folder and removes it both ways.

Example:

    >>> folders.makedirs("/scratch/me/run-1/backup")  # each missing one: drwx------
"""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from typing import BinaryIO, Iterator, Optional, Sequence

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


# Waits until the process that started it has gone (its end of the pipe closes), then removes
# the folders named.
_REMOVER = ("import shutil, sys\nsys.stdin.buffer.read()\n"
            "for f in sys.argv[1:]: shutil.rmtree(f, True)")
# Starts the remover and exits: Ray kills an actor's children with it, not their children.
_DETACHED = ("import subprocess, sys\nsubprocess.Popen([sys.executable, '-I', '-S', '-c', "
             "sys.argv[1], *sys.argv[2:]], start_new_session=True)")


def remove_when_gone(folders: Sequence[str]) -> BinaryIO:
  """Removes `folders` once this process has exited, however it ended; keep what it returns.

  The remover waits on a pipe whose one writer is this process. Ray kills an
  actor's children with it, so the remover is a grandchild in its own session.
  Close what it returns to remove the folders at once.

  Example (a Ray actor's folders, removed also if it is SIGKILLed):

      self._remover = remove_when_gone([folder])
  """
  read, write = os.pipe()
  try:
    subprocess.run([sys.executable, "-I", "-S", "-c", _DETACHED, _REMOVER, *folders],
                   stdin=read, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=60, check=True)
  finally:
    os.close(read)
  return os.fdopen(write, "wb")


@contextlib.contextmanager
def temporary(prefix: str, parent: Optional[str] = None) -> Iterator[str]:
  """A new folder (0700, `tempfile.mkdtemp`), removed when the block ends, also if this process
  is SIGKILLed in it (`remove_when_gone`).

  `parent`: where to make it (default: the temporary directory).

  Example (the folder the tasks of a launch write their progress to):

      with folders.temporary("tfdist-progress-") as directory:
        ...
  """
  directory = tempfile.mkdtemp(prefix=prefix, dir=parent)
  remover = None
  try:
    remover = remove_when_gone([directory])
    yield directory
  finally:
    shutil.rmtree(directory, ignore_errors=True)
    if remover is not None:
      remover.close()
