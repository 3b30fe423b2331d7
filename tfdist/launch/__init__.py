"""Launching: one command as every task of a cluster, here, on SLURM, Ray or Kubernetes.

- `launcher`: the `Launcher` contract, the `Job` it runs, the `LaunchOptions`
  every backend shares, and the registry `tfdist launch` picks a backend from;
- `local`: processes on this machine (`launch_local`, `LocalLauncher`);
- `private_network`: the loopback-only network namespace local tasks run in;
- `notebook`: a function or script as a cluster, from a notebook cell, here or
  on Ray (`notebook_launch`, `ray_launch`), returning the chief's result;
- `slurm/`: sbatch submission from the template in `slurm/templates/`;
- `kubernetes/`: TFJob and Indexed Job manifests; JobSet and Kubeflow
  Trainer v2 TrainJob manifests, which restart a whole job; what closes and
  hardens every kind's pods (a NetworkPolicy per job, the restricted Pod
  Security profile);
- `ray/`: every task on a Ray cluster, supervised from here (`--ray`).

A backend is a module or a folder with a `Launcher` subclass and the options
of its own, registered below. What runs inside each task is `tfdist.task`.

Example:

    >>> from tfdist import launch
    >>> options = launch.LaunchOptions(max_restarts=1, stall_timeout=120)
    >>> launch.make_launcher("local", options).launch(["python", "train.py"], launch.Job(workers=2))
    0
"""

# Their own dependencies (PyYAML, sbatch, Ray) load only when used.
from tfdist.launch import _launcher
from tfdist.launch import _local
from tfdist.launch import private_network
from tfdist.launch import kubernetes
from tfdist.launch import ray
from tfdist.launch import slurm
from tfdist.launch import watchdog
from tfdist.launch.kubernetes import _jobset
from tfdist.launch.kubernetes import _manifests as _kubernetes
from tfdist.launch.ray import _launcher as _ray
from tfdist.launch.slurm import _launcher as _slurm
from tfdist.launch._launcher import (Job, LaunchError, LaunchOptions, Launcher,
                                    available_launchers, make_launcher)
from tfdist.launch._local import (GRACE_PERIOD_SECONDS, NETWORKS, STALL_EXIT_CODE, TIMEOUT_EXIT_CODE,
                                 CannotStart, LocalLauncher, launch_local)
from tfdist.launch._notebook import notebook_launch, ray_launch
# The folder whose sitecustomize makes `import keras` scripts train under multi-worker
# strategies: on PYTHONPATH in an image of your own.
from tfdist.task._keras import SITE_DIR as TASK_SITE_DIR

# Every Kubernetes kind `tfdist launch --kubernetes` prints, registered here in one place
# (as strategies are in tfdist.strategies), not by importing the module that builds it.
_kubernetes.MANIFESTS.update(jobset=_jobset.jobset, trainjob=_jobset.trainjob)

_launcher.register(_local.LocalLauncher)
_launcher.register(_slurm.SlurmLauncher)
_launcher.register(_kubernetes.KubernetesLauncher)
_launcher.register(_ray.RayLauncher)

__all__ = ["CannotStart", "GRACE_PERIOD_SECONDS", "Job", "LaunchError", "LaunchOptions", "Launcher", "LocalLauncher", "NETWORKS", "STALL_EXIT_CODE", "TASK_SITE_DIR", "TIMEOUT_EXIT_CODE",
           "available_launchers", "kubernetes", "launch_local", "make_launcher",
           "notebook_launch", "private_network", "ray", "ray_launch", "slurm", "watchdog"]
