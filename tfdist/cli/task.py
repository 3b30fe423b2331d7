"""`tfdist task -- python train.py`: run a command as this task, with its TF_CONFIG.

For pods and replicas whose platform sets no `TF_CONFIG` (a JobSet or
Kubeflow Trainer v2 pod, a Vertex AI custom container, a SLURM step): the
cluster and this task come from `tfdist.ClusterSpec.from_env()`, which asks
each cluster environment in turn (`tfdist.cluster.environment`); the command
then replaces this process with `TF_CONFIG` set, so any TensorFlow program
reads it, and tfdist's task site first on `PYTHONPATH`, as `tfdist launch`
gives its tasks (`tfdist.launch._task_keras`). An environment that names a task wrongly is one line, exit 2.

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

from tfdist import cluster as cluster_lib
from tfdist.cluster import _grace as grace
from tfdist.launch import _first_failure as first_failure
from tfdist.launch import _supervision as supervision
from tfdist.launch import _task_keras as task_keras
from tfdist.launch import _trains_alone as trains_alone
from tfdist.launch import watchdog

TAKES_ARGUMENTS = True  # The command after '--' (tfdist.cli.main refuses them elsewhere).


def main(argv) -> int:
  # This process only wraps the task: whatever it imports, it never trained alone.
  trains_alone.not_a_task()
  command = argv[1:]
  if not command:
    print("tfdist task: give the command after '--', e.g. `tfdist task -- python train.py`. "
          "Received: no command", file=sys.stderr)
    return 2
  try:
    environment = cluster_lib.detect()
    spec = None if environment is None else environment.cluster_spec(os.environ)
  except (TypeError, ValueError) as e:
    print(f"tfdist task: {e}", file=sys.stderr)
    return 2
  if spec is None or spec.task is None:
    print("tfdist task: this process is no task of a cluster: no environment applies "
          f"(asked, in order: {cluster_lib.available_environments()}), or TF_CONFIG names no "
          "task. Run it in a pod of tfdist's manifests, or set TF_CONFIG. "
          f"Received: {'no environment' if environment is None else environment.name}",
          file=sys.stderr)
    return 2
  # The task site, as `tfdist launch` gives it: Keras 3 scripts train under multi-worker
  # strategies, Keras's own callbacks write once, a task that would train alone is told.
  env = dict(os.environ, TF_CONFIG=spec.tf_config(spec.task.type, spec.task.index),
             PYTHONPATH=task_keras.python_path(os.environ))
  print(f"tfdist task: {spec.task} of {spec} (from {environment.name})", flush=True)
  training = sum(1 for task in spec.tasks() if supervision.trains(spec, task))
  try:
    stall_timeout = watchdog.resolve_timeout(None, training, env)
    grace_period, _ = grace.grace_period(env)
  except ValueError as e:
    print(f"tfdist task: {e}", file=sys.stderr)
    return 2
  if stall_timeout and supervision.trains(spec, spec.task):
    return _watched(command, env, str(spec.task), stall_timeout, grace_period)
  try:
    os.execvpe(command[0], command, env)
  except OSError as e:
    return _could_not_run(command, e)


def _could_not_run(command, error: OSError) -> int:
  print(f"tfdist task: could not run {command[0]!r}: {error.strerror}. Received: "
        f"command={command!r}", file=sys.stderr)
  return 127


def _watched(command, env, task, stall_timeout, grace_period) -> int:
  """The command as a child, watched alone for stalls: the launcher cannot see a pod's steps."""
  passed_on = []
  try:
    # The task dies with this wrapper, as it did when the wrapper replaced itself with it.
    code = watchdog.watch_task(command, env, task, stall_timeout, sys.stdout, grace_period,
                               preexec_fn=supervision.die_with_parent(os.getpid()),
                               passed_on=passed_on,
                               keep_steps_in=env.get(trains_alone.JOINED_DIR_ENV))
  except OSError as e:
    return _could_not_run(command, e)
  if not passed_on:  # It ended on its own: the launcher may name it as the first to fail.
    first_failure.record(task, code, env)
  if code < 0:  # Die of the same signal, as the command did.
    sys.stdout.flush()
    if -code not in (signal.SIGKILL, signal.SIGSTOP):  # Those keep their default action.
      signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
  return code
