"""Launching a local cluster from a notebook cell: a function or script as every task."""

import inspect
import os
import sys
import textwrap
from typing import Optional, Sequence, TextIO

from tfdist.launch import launcher
from tfdist.launch import local


def notebook_launch(function_or_script, *, workers: int = 2, ps: int = 0, chief: bool = False,
                    args: Sequence[str] = (), timeout: Optional[float] = None,
                    output: Optional[TextIO] = None) -> None:
  """Runs a function or script as every task of a local cluster, from a notebook cell.

  Each task's lines appear in the cell as they come, prefixed `[worker:1]`. The
  cell blocks until the cluster is done; interrupting the kernel stops every
  task. A function runs in fresh processes from its source, so it must be
  self-contained: do its imports inside it (TensorFlow cannot be forked safely).

  Example:

      >>> def train():
      ...   import tfdist
      ...   strategy = tfdist.make_strategy("multi_worker_mirrored")
      ...   ...
      >>> tfdist.launch.notebook_launch(train, workers=2)

  Args:
    function_or_script: a function taking no arguments, or a script's path.
    workers: worker tasks of the local cluster (see `ClusterSpec.local`).
    ps: parameter-server tasks; with ps tasks a chief is added, as every
      launcher does (`launcher.with_coordinator`).
    chief: whether the cluster has a chief task.
    args: command-line arguments for a script.
    timeout: seconds before the cluster is stopped.
    output: where lines go (default: the cell, i.e. sys.stdout).

  Raises:
    TypeError: neither a function nor a path.
    LaunchError: a task failed, timed out, or the cell was interrupted.
  """
  if callable(function_or_script):
    name = function_or_script.__name__
    try:
      source = textwrap.dedent(inspect.getsource(function_or_script))
    except (OSError, TypeError) as e:
      raise TypeError(f"Cannot read the source of {name!r}; define it in a cell or a file. "
                      f"Received: {function_or_script!r}") from e
    command = [sys.executable, "-c", f"{source}\n{name}()\n"]
  elif isinstance(function_or_script, (str, os.PathLike)):
    command = [sys.executable, os.fspath(function_or_script), *args]
  else:
    raise TypeError("notebook_launch takes a function or a script path. "
                    f"Received: {type(function_or_script).__name__}")
  job = launcher.Job(workers=workers, ps=ps, chief=chief)
  code = local.LocalLauncher(timeout=timeout, output=output or sys.stdout).launch(command, job)
  if code != 0:
    raise local.LaunchError(f"The cluster {job} ended with exit code {code}; see the lines "
                            f"above. Received: exit code {code}")
