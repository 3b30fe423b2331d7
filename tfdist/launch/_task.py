"""A command run as this task of a cluster, with its TF_CONFIG: the task side's wrapper.

`tfdist task -- CMD` (in pods and SLURM steps whose platform sets no
`TF_CONFIG`) and, on each Ray node, `python -m tfdist.launch._task -- CMD`
(which `tfdist.launch.ray._launcher` starts) both run `run`. The cluster and this task
come from `tfdist.ClusterSpec.from_env()`, which asks each cluster environment
in turn (`tfdist.cluster.environment`); the command then replaces this process
with `TF_CONFIG` set, so any TensorFlow program reads it, and tfdist's task
site first on `PYTHONPATH`, as `tfdist launch` gives its tasks
(`tfdist.task._keras`). An environment that names a task wrongly is one
line, exit 2.

In a job of two or more training tasks the command runs as a child instead,
watched for stalls (`tfdist.launch.watchdog.watch_task`; `TFDIST_STALL_TIMEOUT`,
0 for the plain replacement): a task whose steps stop dumps its stacks, says
where it is, and exits with code 3 for the platform to restart the job. A
command that fails on its own leaves its exit code for the launcher, which
names the task that failed first (`tfdist.launch._first_failure`).
"""

import os
import signal
import sys
from typing import Mapping, Optional, Sequence, TextIO

from tfdist import cluster as cluster_lib
from tfdist.cluster import _grace as grace
from tfdist.launch import _first_failure as first_failure
from tfdist.launch import _supervision as supervision
from tfdist.task import _keras as task_keras
from tfdist.task import _trains_alone as trains_alone
from tfdist.launch import watchdog


def run(command: Sequence[str], environ: Optional[Mapping[str, str]] = None,
        out: Optional[TextIO] = None, err: Optional[TextIO] = None, *,
        name: str = "tfdist task") -> int:
  """Runs `command` as the task `environ` names; its exit code (2 for a bad environment).

  `out` gets the one line naming the task and the stall watch's lines; `err`
  the one-line errors, each starting with `name`.
  """
  environ = os.environ if environ is None else environ
  out, err = out or sys.stdout, err or sys.stderr
  # This process only wraps the task: whatever it imports, it never trained alone.
  trains_alone.not_a_task()

  def refuse(line: str, code: int = 2) -> int:
    err.write(f"{name}: {line}\n")
    err.flush()
    return code

  if not command:
    return refuse(f"give the command after '--', e.g. `{name} -- python train.py`. "
                  "Received: no command")
  try:
    environment = cluster_lib.detect(environ)
    spec = None if environment is None else environment.cluster_spec(environ)
  except (TypeError, ValueError) as e:
    return refuse(str(e))
  if spec is None or spec.task is None:
    return refuse(
        "this process is no task of a cluster: no environment applies (asked, in order: "
        f"{cluster_lib.available_environments()}), or TF_CONFIG names no task. Run it in a pod "
        "of tfdist's manifests, or set TF_CONFIG. "
        f"Received: {'no environment' if environment is None else environment.name}")
  # The task site, as `tfdist launch` gives it: Keras 3 scripts train under multi-worker
  # strategies, Keras's own callbacks write once, a task that would train alone is told.
  env = dict(environ, TF_CONFIG=spec.tf_config(spec.task.type, spec.task.index),
             PYTHONPATH=task_keras.python_path(environ))
  out.write(f"{name}: {spec.task} of {spec} (from {environment.name})\n")
  out.flush()
  training = sum(1 for task in spec.tasks() if supervision.trains(spec, task))
  try:
    stall_timeout = watchdog.resolve_timeout(None, training, env)
    grace_period, _ = grace.grace_period(env)
  except ValueError as e:
    return refuse(str(e))
  if stall_timeout and supervision.trains(spec, spec.task):
    return _watched(command, env, str(spec.task), stall_timeout, grace_period, out, refuse)
  try:
    os.execvpe(command[0], list(command), env)
  except OSError as e:
    return refuse(f"could not run {command[0]!r}: {e.strerror}. Received: "
                  f"command={list(command)!r}", 127)


def _watched(command, env, task, stall_timeout, grace_period, out, refuse) -> int:
  """The command as a child, watched alone for stalls: the launcher cannot see a pod's steps."""
  passed_on = []
  try:
    # The task dies with this wrapper, as it did when the wrapper replaced itself with it.
    code = watchdog.watch_task(list(command), env, task, stall_timeout, out, grace_period,
                               preexec_fn=supervision.die_with_parent(os.getpid()),
                               passed_on=passed_on,
                               keep_steps_in=env.get(trains_alone.JOINED_DIR_ENV))
  except OSError as e:
    return refuse(f"could not run {command[0]!r}: {e.strerror}. Received: "
                  f"command={list(command)!r}", 127)
  if not passed_on:  # It ended on its own: the launcher may name it as the first to fail.
    first_failure.record(task, code, env)
  if code < 0:  # Die of the same signal, as the command did.
    out.flush()
    if -code not in (signal.SIGKILL, signal.SIGSTOP):  # Those keep their default action.
      signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
  return code


if __name__ == "__main__":
  # As `tfdist task` runs it (tfdist.cli.main): TensorFlow's C++ INFO and WARNING lines stay
  # out of the task's output unless its environment asks for them.
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  sys.exit(run(sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else sys.argv[1:]))
