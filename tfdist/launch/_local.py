"""Local multi-process clusters: one subprocess per task, each with its TF_CONFIG.

`launch_local(["python", "train.py"], ClusterSpec.local(workers=2))` runs, for
each task of the spec, the child command line

    TF_CONFIG='{"cluster": {...}, "task": {"type": "worker", "index": i}}' python train.py

in its own process group, prefixes every output line with the task
(`[worker:1] ...`), and returns 0 only if every task that must finish (chief,
workers, evaluator) exited with 0. Parameter servers never finish by themselves;
they are stopped when the others are done. If any task fails, every other task
is stopped within seconds and the failing task's last lines are shown again.
In parameter-server training (the spec has ps tasks) workers only serve too, so
the chief's exit ends the job.

With a `DataServiceSpec`, a tf.data service dispatcher and its data workers
run beside the tasks (`tfdist data_service`), and every task gets its
address and a job name (new at each restart of the cluster). Servers never
finish by themselves: a lost data worker is restarted alone on its port (TF
lets data workers come and go; the splits it held that epoch are not
visited), a lost dispatcher too when it journals to a work dir; otherwise
the job stops, because trainers would wait for their data forever.
"""

import os
import shutil
import sys
from typing import Mapping, Optional, Sequence, TextIO

from tfdist import cluster as cluster_lib
from tfdist.cluster import _data_service as data_service_lib
from tfdist.launch import _launcher as launcher_lib
from tfdist.launch import private_network
from tfdist.launch import _supervision as supervision
from tfdist.launch import _task_keras as task_keras
from tfdist.launch import _threads as threads
from tfdist.launch import _trains_alone as trains_alone
from tfdist.launch import watchdog
# Public here, where users find the launcher; defined beside the processes they concern.
from tfdist.launch._supervision import (STALL_EXIT_CODE, TIMEOUT_EXIT_CODE, LaunchError,
                                       must_finish, signal_group, task_environment)

# Seconds between SIGTERM and SIGKILL when stopping a task: what SLURM (KillWait)
# and Kubernetes (terminationGracePeriodSeconds) give, so a backup that fits
# there fits here.
GRACE_PERIOD_SECONDS = 30.0
NETWORKS = ("auto", "loopback", "host")

__all__ = ["GRACE_PERIOD_SECONDS", "NETWORKS", "STALL_EXIT_CODE", "TIMEOUT_EXIT_CODE", "LaunchError",
           "LocalLauncher", "launch_local", "must_finish", "signal_group", "task_environment"]


def launch_local(command: Sequence[str], spec: cluster_lib.ClusterSpec, *,
                 timeout: Optional[float] = None,
                 env: Optional[Mapping[str, str]] = None,
                 output: Optional[TextIO] = None,
                 max_restarts: int = 0,
                 network: Optional[str] = None,
                 grace_period: float = GRACE_PERIOD_SECONDS,
                 keras: Optional[str] = None,
                 data_service: Optional[data_service_lib.DataServiceSpec] = None,
                 stall_timeout: Optional[float] = None) -> int:
  """Runs `command` once per task of `spec` and waits for the cluster.

  Args:
    command: the child command line, e.g. ["python", "train.py", "--epochs=3"].
    spec: the cluster; every task gets its own process and TF_CONFIG.
    timeout: seconds before the whole cluster is stopped (None: no limit).
    env: base environment for the children (default: this process's).
    output: where prefixed lines go (default: sys.stdout).
    max_restarts: how many times a failed task may be restarted. Without ps
      tasks every task is restarted together (collectives need all of them);
      a parameter-server worker is restarted alone while the others go on.
      Training resumes from its backup (see `tfdist.training.checkpoints`).
    network: "loopback" runs the tasks in a private network namespace that has
      only a loopback interface, because TensorFlow's gRPC servers listen on
      every interface; "host" shares this machine's network; "auto" is
      loopback for an all-loopback spec (an error where no namespace can be
      made) and the host's for real hosts. None: `TFDIST_NETWORK`, else "auto".
    grace_period: seconds a task has between SIGTERM and SIGKILL when the
      cluster is stopped (on a failure, a timeout, or SIGTERM/SIGINT to the
      launcher): time for `tfdist.training.checkpoints.BackupAndRestore` to back up.
    keras: the tasks' Keras, "tf_keras" or "keras3" (None: TF_USE_LEGACY_KERAS
      of `env`, else tf_keras); see `tfdist.launch._task_keras`.
    data_service: a tf.data service to run beside the tasks (its ports on
      this machine), e.g. `DataServiceSpec.local(workers=2)`; see above.
    stall_timeout: seconds without a training step in any task before the
      job is stalled: every task's Python stacks are shown, the task to look
      at is named, and the job ends with STALL_EXIT_CODE (or restarts under
      `max_restarts`); see `tfdist.launch.watchdog`. 0: no watchdog. None:
      `TFDIST_STALL_TIMEOUT`, else 300 for two or more training tasks.

  Returns:
    0 if every task that must finish exited with 0; else the first failing
    task's exit code (negative for a signal), TIMEOUT_EXIT_CODE, or STALL_EXIT_CODE.

  Raises:
    ValueError: empty command, bad max_restarts or network, ps tasks without a chief, or
      a bad TFDIST_TRAINS_ALONE (see `tfdist.launch._trains_alone`; a job in which no
      two tasks joined a collective is named at its end).
    LaunchError: the command cannot be started (e.g. not found).
    private_network.Unavailable: no private network for an all-loopback spec,
      and network is not "host".
  """
  if not command:
    raise ValueError("`command` is empty: give the program to run, e.g. "
                     "['python', 'train.py']. Received: []")
  if not isinstance(max_restarts, int) or max_restarts < 0:
    raise ValueError(f"`max_restarts` must be an integer >= 0. Received: {max_restarts!r}")
  source = "network"
  if network is None:
    source, network = private_network.NETWORK_ENV, os.environ.get(
        private_network.NETWORK_ENV, "auto")
  if network not in NETWORKS:
    raise ValueError(f"`{source}` must be one of {list(NETWORKS)}. Received: {network!r}")
  if not (isinstance(grace_period, (int, float)) and grace_period >= 0):
    raise ValueError(f"`grace_period` must be a number of seconds >= 0. "
                     f"Received: grace_period={grace_period!r}")
  if cluster_lib.PS in spec.jobs and cluster_lib.CHIEF not in spec.jobs:
    # Nothing would train and nothing would end the job: ps and workers only serve.
    raise ValueError(
        "A parameter-server cluster needs a chief: only the chief runs the training "
        "program, and its exit ends the job. Build the spec with chief=True, e.g. "
        f"ClusterSpec.local(workers=2, ps=1, chief=True). Received: {spec}")
  base = os.environ if env is None else env
  env = {**base, **task_keras.variables(keras, base)}
  env = threads.share_cores(spec, env)  # Each task its share of the cores' threads.
  trains_alone.mode(env)  # A bad TFDIST_TRAINS_ALONE fails now, not after the job.
  # Checked here: behind `nsenter`, a missing program would only be exit code 127.
  path = env.get("PATH")
  if shutil.which(command[0], path=path) is None:
    raise LaunchError(
        f"Could not start task {next(spec.tasks())}: {command[0]!r} is not an executable "
        f"file nor on PATH. Check that the command exists and is executable. "
        f"Received: command={list(command)!r}")
  training = sum(1 for task in spec.tasks() if supervision.trains(spec, task))
  stall_timeout = watchdog.resolve_timeout(stall_timeout, training, env)
  # Where the tasks record building a strategy over the cluster (tfdist.launch._trains_alone).
  with trains_alone.joined_folder(env) as joined_dir:
    cluster = supervision.Cluster(command, spec, env, output or sys.stdout, grace_period,
                                  data_service, stall_timeout=stall_timeout)
    with private_network.enter(network, spec, cluster.report) as prefix:
      cluster.prefix = prefix
      code = cluster.run(timeout, max_restarts)
    return trains_alone.job_end(code, joined_dir, env, cluster.report)


class LocalLauncher(launcher_lib.Launcher):
  """Every task as a process of this machine, on free loopback ports (`launch_local`)."""

  name = "local"

  def __init__(self, *, timeout: Optional[float] = None, max_restarts: int = 0,
               network: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
               output: Optional[TextIO] = None,
               grace_period: float = GRACE_PERIOD_SECONDS, keras: Optional[str] = None,
               data_work_dir: Optional[str] = None, stall_timeout: Optional[float] = None):
    self.options = dict(timeout=timeout, max_restarts=max_restarts, network=network, env=env,
                        grace_period=grace_period, keras=keras, stall_timeout=stall_timeout)
    self.output = output
    self.data_work_dir = data_work_dir

  def launch(self, command: Sequence[str], job: launcher_lib.Job) -> int:
    output = self.output or sys.stdout
    job, note = launcher_lib.with_coordinator(job)
    if note:
      output.write(f"[tfdist launch] {note}\n")
    spec = cluster_lib.ClusterSpec.local(job.workers, ps=job.ps, chief=job.chief,
                                         evaluator=job.evaluator)
    output.write(f"[tfdist launch] {spec}\n")
    data_service = None
    if job.data_workers:
      data_service = data_service_lib.DataServiceSpec.local(job.data_workers,
                                                            work_dir=self.data_work_dir)
      output.write(f"[tfdist launch] {data_service}\n")
    elif self.data_work_dir:
      raise ValueError("`data_work_dir` journals a tf.data service's dispatcher; give "
                       "data_workers >= 1 too. Received: data_workers=0, "
                       f"data_work_dir={self.data_work_dir!r}")
    output.flush()
    return launch_local(command, spec, output=output, data_service=data_service,
                        **self.options)
