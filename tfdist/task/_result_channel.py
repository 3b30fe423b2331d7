"""How a function's return value comes back from its task: a file only this launch made.

`notebook_launch` and `ray_launch` run a function as every task and return
what it returned on the task that ends the job (the chief, else worker 0).
That value travels pickled, so whoever can place it can run code in the
caller: it must never come from text a task prints (a task may print records
of untrusted data). So the launch makes a folder only its user can enter
(`tempfile.mkdtemp`, mode 0700), tells the reporting task alone where to
write (`RESULT_FILE_ENV`), and reads that file only after the job succeeded.
On Ray the task's node makes its own such folder and the bytes come back in
Ray's object store (`tfdist.launch.ray._launcher.TaskProcess.result`).

The function's source reaches the tasks in their environment (readable by
their user only), never in argv, which `ps` shows to every user of a node.

Measuring processes (`tfdist train` under `compare`, `tfdist advise`, a
command that launches itself as a cluster) hand back JSON the same way:
`run_for_json` gives them a path in such a folder and reads what they wrote.

Example:

    >>> with result_channel.made() as path:
    ...   env[result_channel.RESULT_FILE_ENV] = path
    ...   ...  # run the job
    ...   value = result_channel.read(path)
"""

import contextlib
import json
import os
import pickle
import shutil
import tempfile
from typing import Any, Callable, Iterator, Optional, Tuple

from tfdist import _variables as variables

FUNCTION_ENV = variables.FUNCTION  # The function's name...
SOURCE_ENV = variables.FUNCTION_SOURCE  # ...and the source that defines it.
RESULT_TASK_ENV = variables.RESULT_TASK  # The task that reports: "chief:0" or "worker:0".
RESULT_FILE_ENV = variables.RESULT_FILE  # Where it writes, in a folder made for this launch.
NAME = "result.pickle"  # The file, in its folder.


@contextlib.contextmanager
def made(name: str = NAME) -> Iterator[str]:
  """A result file's path in a new folder only this user can enter, removed afterwards."""
  folder = tempfile.mkdtemp(prefix="tfdist-result-")  # Mode 0700, a name no one could guess.
  try:
    yield os.path.join(folder, name)
  finally:
    shutil.rmtree(folder, ignore_errors=True)


def run_for_json(start: Callable[[str], Any]) -> Tuple[Any, Optional[Any]]:
  """Runs a process for the JSON it writes: (its exit code, what it wrote, or None).

  `start(path)` runs the process (or a cluster of them), telling it to write
  its result to `path`, and returns the exit code (or what stands for one, e.g.
  "timeout"). The result is read only after a code of 0; a process that
  failed or wrote nothing gives None.
  """
  with made("result.json") as path:
    code = start(path)
    if code != 0 or not os.path.exists(path):
      return code, None
    with open(path) as f:
      return code, json.load(f)


def write(path: str, data: bytes) -> None:
  """Writes a pickled result to a new file at `path`, mode 0600 (never over a file or link)."""
  descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
  with os.fdopen(descriptor, "wb") as f:
    f.write(data)


def read(path: str) -> Any:
  """The result written at `path`, unpickled; None if the task wrote none."""
  try:
    with open(path, "rb") as f:
      return pickle.load(f)
  except FileNotFoundError:
    return None  # A script, or a function that ended its task without returning.
