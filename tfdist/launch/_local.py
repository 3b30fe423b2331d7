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
run beside the tasks (`python -m tfdist.launch._serve_data_service`), and every task gets its
address and a job name (new at each restart of the cluster). Servers never
finish by themselves: a lost data worker is restarted alone on its port (TF
lets data workers come and go; the splits it held that epoch are not
visited), a lost dispatcher too when it journals to a work dir; otherwise
the job stops, because trainers would wait for their data forever.
"""

import os
import shutil
import sys
from typing import Optional, Sequence

from tfdist import cluster as cluster_lib
from tfdist.cluster import _data_service as data_service_lib
from tfdist.launch import _launcher as launcher_lib
from tfdist.launch import private_network
from tfdist.launch import _supervision as supervision
from tfdist.launch import _threads as threads
from tfdist.task import _trains_alone as trains_alone
from tfdist.launch import watchdog
# Public here, where users find the launcher; defined beside the processes they concern.
from tfdist.launch._launcher import GRACE_PERIOD_SECONDS, LaunchError
from tfdist.launch._supervision import (STALL_EXIT_CODE, TIMEOUT_EXIT_CODE, CannotStart,
                                       must_finish, signal_group, task_environment)

NETWORKS = ("auto", "loopback", "host")

__all__ = ["GRACE_PERIOD_SECONDS", "NETWORKS", "STALL_EXIT_CODE", "TIMEOUT_EXIT_CODE",
           "CannotStart", "LaunchError",
           "LocalLauncher", "launch_local", "must_finish", "signal_group", "task_environment"]


def launch_local(command: Sequence[str], spec: cluster_lib.ClusterSpec,
                 options: Optional[launcher_lib.LaunchOptions] = None, *,
                 network: Optional[str] = None,
                 data_service: Optional[data_service_lib.DataServiceSpec] = None) -> int:
  """Runs `command` once per task of `spec` and waits for the cluster.

  Args:
    command: the child command line, e.g. ["python", "train.py", "--epochs=3"].
    spec: the cluster; every task gets its own process and TF_CONFIG.
    options: what every launcher shares (`tfdist.launch.LaunchOptions`): the time
      limit, restarts, grace period, Keras, environment, output, stall watch,
      profile and trains-alone check. Here, a restart restarts every task
      together when there are no ps tasks (collectives need all of them); a
      parameter-server worker is restarted alone while the others go on. A
      stalled job ends with STALL_EXIT_CODE (or restarts under `max_restarts`).
    network: "loopback" runs the tasks in a private network namespace that has
      only a loopback interface, because TensorFlow's gRPC servers listen on
      every interface; "host" shares this machine's network; "auto" is
      loopback for an all-loopback spec (an error where no namespace can be
      made) and the host's for real hosts. None: `TFDIST_NETWORK`, else "auto".
    data_service: a tf.data service to run beside the tasks (its ports on
      this machine), e.g. `DataServiceSpec.local(workers=2)`; see above.

  Returns:
    0 if every task that must finish exited with 0; else the first failing
    task's exit code (negative for a signal), TIMEOUT_EXIT_CODE, or STALL_EXIT_CODE.

  Raises:
    ValueError: empty command, a bad network, ps tasks without a chief, tf_keras
      chosen where it is not installed (`LaunchOptions.environment`), or
      a bad TFDIST_TRAINS_ALONE (see `tfdist.task._trains_alone`; a job in which no
      two tasks joined a collective is named at its end).
    LaunchError: the command cannot be started (e.g. not found; `CannotStart`).
    private_network.Unavailable: no private network for an all-loopback spec,
      and network is not "host".
  """
  if not command:
    raise ValueError("`command` is empty: give the program to run, e.g. "
                     "['python', 'train.py']. Received: []")
  options = options or launcher_lib.LaunchOptions()
  source = "network"
  if network is None:
    source, network = private_network.NETWORK_ENV, os.environ.get(
        private_network.NETWORK_ENV, "auto")
  if network not in NETWORKS:
    raise ValueError(f"`{source}` must be one of {list(NETWORKS)}. Received: {network!r}")
  if cluster_lib.PS in spec.jobs and cluster_lib.CHIEF not in spec.jobs:
    # Nothing would train and nothing would end the job: ps and workers only serve.
    raise ValueError(
        "A parameter-server cluster needs a chief: only the chief runs the training "
        "program, and its exit ends the job. Build the spec with chief=True, e.g. "
        f"ClusterSpec.local(workers=2, ps=1, chief=True). Received: {spec}")
  # Each task its share of the cores' threads; the tasks import this machine's packages.
  env = threads.share_cores(spec, options.environment(here=True))
  trains_alone.mode(env)  # A bad TFDIST_TRAINS_ALONE fails now, not after the job.
  # Checked here: behind `nsenter`, a missing program would only be exit code 127.
  path = env.get("PATH")
  if shutil.which(command[0], path=path) is None:
    raise CannotStart(
        f"Could not start task {next(spec.tasks())}: {command[0]!r} is not an executable "
        f"file nor on PATH. Check that the command exists and is executable. "
        f"Received: command={list(command)!r}")
  training = sum(1 for task in spec.tasks() if supervision.trains(spec, task))
  stall_timeout = watchdog.resolve_timeout(options.stall_timeout, training, env)
  # Where the tasks record building a strategy over the cluster (tfdist.task._trains_alone).
  with trains_alone.joined_folder(env) as joined_dir:
    cluster = supervision.Cluster(command, spec, env, options.output or sys.stdout,
                                  options.grace_period, data_service,
                                  stall_timeout=stall_timeout)
    with private_network.enter(network, spec, cluster.report) as prefix:
      cluster.prefix = prefix
      code = cluster.run(options.timeout, options.max_restarts)
    return trains_alone.job_end(code, joined_dir, env, cluster.report)


class LocalLauncher(launcher_lib.Launcher):
  """Every task as a process of this machine, on free loopback ports (`launch_local`).

  Args:
    options: what every launcher shares (`LaunchOptions`).
    network: "auto", "loopback" or "host" (see `launch_local`).
  """

  name = "local"

  def __init__(self, options: Optional[launcher_lib.LaunchOptions] = None, *,
               network: Optional[str] = None):
    super().__init__(options)
    self.network = network

  def launch(self, command: Sequence[str], job: launcher_lib.Job) -> int:
    output = self.options.output or sys.stdout
    job, note = launcher_lib.with_coordinator(job)
    if note:
      output.write(f"[tfdist launch] {note}\n")
    spec = cluster_lib.ClusterSpec.local(job.workers, ps=job.ps, chief=job.chief,
                                         evaluator=job.evaluator)
    output.write(f"[tfdist launch] {spec}\n")
    data_service = None
    if job.data_workers:
      data_service = data_service_lib.DataServiceSpec.local(
          job.data_workers, work_dir=self.options.data_work_dir)
      output.write(f"[tfdist launch] {data_service}\n")
    elif self.options.data_work_dir:
      raise ValueError("`data_work_dir` journals a tf.data service's dispatcher; give "
                       "data_workers >= 1 too. Received: data_workers=0, "
                       f"data_work_dir={self.options.data_work_dir!r}")
    output.flush()
    return launch_local(command, spec, self.options, network=self.network,
                        data_service=data_service)
