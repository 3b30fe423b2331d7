"""Launching a cluster from a notebook cell: a function or script as every task.

Locally (`notebook_launch`) or on a Ray cluster (`notebook_launch(..., ray=ADDRESS)`,
or `ray_launch`); a function's return value on the task that ends the job
(the chief, else worker 0) comes back to the cell.
"""

import inspect
import os
import sys
import textwrap
from typing import Any, Optional, Sequence, TextIO

from tfdist.launch import _launcher as launcher
from tfdist.launch import _local as local
from tfdist.task import _result_channel as result_channel


def reporting_task(job: launcher.Job) -> str:
  """The task whose return value comes back: "chief:0", else "worker:0"."""
  return "chief:0" if launcher.with_coordinator(job)[0].chief else "worker:0"


def notebook_launch(function_or_script, *, workers: int = 2, ps: int = 0, chief: bool = False,
                    args: Sequence[str] = (), timeout: Optional[float] = None,
                    output: Optional[TextIO] = None, ray: Optional[str] = None) -> Any:
  """Runs a function or script as every task of a cluster, from a notebook cell.

  Each task's lines appear in the cell as they come, prefixed `[worker:1]`. The
  cell blocks until the cluster is done; interrupting the kernel stops every
  task. A function runs in fresh processes from its source, so it must be
  self-contained: do its imports inside it (TensorFlow cannot be forked safely).
  What it returns on the task that ends the job (the chief, else worker 0)
  comes back, pickled, as this call's value: that task writes it to a file in
  a folder this call made for it (mode 0700), never through the output, so a
  task that prints untrusted text cannot make the cell load anything; the
  function's source reaches the tasks in their environment, not their
  command line, which every user of the machine can read with `ps` (see
  `tfdist.task._result_channel`).

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
    ray: run the tasks on this Ray cluster ("host:port", "auto", "local" to
      start one here, or "" for `RAY_ADDRESS`) instead of this machine; see
      `tfdist.launch.ray._launcher`.

  Returns:
    A function's return value on the chief (else worker 0); None for a script.

  Raises:
    TypeError: neither a function nor a path.
    LaunchError: a task failed, timed out, or the cell was interrupted.
    ValueError: without `ray`, tf_keras chosen (TF_USE_LEGACY_KERAS=1) where it is not
      installed (`LaunchOptions.environment`).
  """
  job = launcher.Job(workers=workers, ps=ps, chief=chief)
  env = dict(os.environ)
  if callable(function_or_script):
    name = function_or_script.__name__
    try:
      source = textwrap.dedent(inspect.getsource(function_or_script))
    except (OSError, TypeError) as e:
      raise TypeError(f"Cannot read the source of {name!r}; define it in a cell or a file. "
                      f"Received: {function_or_script!r}") from e
    command = [sys.executable, "-m", "tfdist.task._notebook"]
    env.update({result_channel.FUNCTION_ENV: name, result_channel.SOURCE_ENV: source,
                result_channel.RESULT_TASK_ENV: reporting_task(job)})
  elif isinstance(function_or_script, (str, os.PathLike)):
    command = [sys.executable, os.fspath(function_or_script), *args]
  else:
    raise TypeError("notebook_launch takes a function or a script path. "
                    f"Received: {type(function_or_script).__name__}")
  output = output or sys.stdout
  with result_channel.made() as result_file:
    if callable(function_or_script):
      env[result_channel.RESULT_FILE_ENV] = result_file
    options = launcher.LaunchOptions(timeout=timeout, output=output, env=env)
    if ray is None:
      chosen = local.LocalLauncher(options)
    else:
      from tfdist.launch.ray import _launcher as ray_lib  # pylint: disable=import-outside-toplevel
      chosen = ray_lib.RayLauncher(options, address=ray or None)
    code = chosen.launch(command, job)
    if code != 0:
      raise local.LaunchError(f"The cluster {job} ended with exit code {code}; see the lines "
                              f"above. Received: exit code {code}")
    # Only a function's launch has a result; a script's writes none to read.
    return result_channel.read(result_file) if callable(function_or_script) else None


def ray_launch(function_or_script, *, address: Optional[str] = None, **kwargs) -> Any:
  """`notebook_launch` on a Ray cluster: every task on its nodes (see `tfdist.launch.ray._launcher`).

  `address` as `tfdist launch --ray` takes it: "host:port", "auto", "local",
  or None for `RAY_ADDRESS`. The other arguments are `notebook_launch`'s.

  Example:

      >>> result = tfdist.launch.ray_launch(train, workers=2, ps=1, address="10.0.0.5:6379")
  """
  return notebook_launch(function_or_script, ray=address or "", **kwargs)
