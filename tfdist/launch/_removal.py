"""Folders removed once the process that made them is gone, however it ended.

A launcher or task wrapper keeps its folders (the tasks' records, their progress)
in the temporary directory and removes them in a `finally`; a process SIGKILLed
(the OOM killer, `kill -9`, an actor Ray kills) runs none. `remove_when_gone`
starts a small detached process that removes them once the maker has gone.
"""

import os
import subprocess
import sys
from typing import BinaryIO, Sequence

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
