"""`tfdist launch --workers 2 -- python train.py --epochs 3`

Starts a local cluster on free loopback ports: one process per task, each with
its TF_CONFIG, output prefixed with the task. Exits with the cluster's code.

With --slurm, submits the same job to SLURM instead (one SLURM task per TF
task, see launch/slurm/tfdist.sbatch), streams its output and exits with
the job's exit code.

With --ray[=ADDRESS], runs every task on a Ray cluster (see tfdist.launch.ray._launcher).

With --kubernetes=jobset|trainjob|tfjob|indexed, prints the manifests for
`kubectl apply -f -` (a JobSet; Kubeflow Trainer v2's runtime and TrainJob; a
Kubeflow TFJob; or Indexed Jobs plus a headless Service) and starts nothing.
"""

import os
import sys

from absl import flags

from tfdist import launch as launch_lib
from tfdist.launch.kubernetes import _manifests as kubernetes
from tfdist.task import _profile_summary as profile_summary
from tfdist.launch.ray import _launcher as ray_launch
from tfdist.task import _keras as task_keras
from tfdist.task import _trains_alone as trains_alone

TAKES_ARGUMENTS = True  # The command after '--' (tfdist.cli.main refuses them elsewhere).

_WORKERS = flags.DEFINE_integer("workers", 2, "Number of worker tasks.", lower_bound=1)
_PS = flags.DEFINE_integer("ps", 0, "Number of parameter-server tasks.", lower_bound=0)
_CHIEF = flags.DEFINE_bool("chief", False, "Add a chief task.")
_EVALUATOR = flags.DEFINE_bool("evaluator", False, "Add a sidecar evaluator task.")
_TIMEOUT = flags.DEFINE_float("timeout", None, "Stop the whole cluster after this many "
                              "seconds (exit code 124).", lower_bound=0)
_MAX_RESTARTS = flags.DEFINE_integer(
    "max_restarts", 0, "Restart a failed task this many times in all: every task together "
    "(collectives need all of them), or a parameter-server worker alone. Training resumes "
    "from its BackupAndRestore backup. tf.data service servers restart alone, up to this "
    "many times too (at least 3). --slurm: a failed step runs again in the same "
    "allocation.", lower_bound=0)
_GRACE_PERIOD = flags.DEFINE_float(
    "grace_period", launch_lib.GRACE_PERIOD_SECONDS, "Seconds a task has between SIGTERM and "
    "SIGKILL when the cluster is stopped, to back up (SLURM's and Kubernetes' default).",
    lower_bound=0)
_STALL_TIMEOUT = flags.DEFINE_float(
    "stall_timeout", None, "Seconds without a training step in any task before the job is "
    "stalled: every task's Python stacks are shown, the task to look at is named, and the "
    "job ends (exit code 3) or restarts under --max_restarts. 0: off. Default: "
    "TFDIST_STALL_TIMEOUT, else 300 for two or more training tasks (longer for jobs whose "
    "steps are slow, and three times as long for a first step that compiles).", lower_bound=0)
_PROFILE = flags.DEFINE_string(
    "profile", None, "Trace these steps on every task with TensorFlow's profiler, e.g. "
    "--profile=100-120 (steps count from 1); the traces go under --profile_dir, one run per "
    "task, for TensorBoard's profile plugin or xprof.")
_PROFILE_DIR = flags.DEFINE_string(
    "profile_dir", "tfdist-profile", "--profile: the log directory the tasks' runs go under "
    "(on other machines: a path they share).")
_NETWORK = flags.DEFINE_enum(
    "network", None, list(launch_lib.NETWORKS), "loopback: tasks run in a private network "
    "namespace with only loopback (TensorFlow's servers listen on every interface); host: "
    "the machine's network; auto: loopback for a local cluster, refused where the kernel "
    "allows no namespace. Default: TFDIST_NETWORK, else auto.")
_KERAS = flags.DEFINE_enum(
    "keras", None, list(task_keras.KERAS_CHOICES),
    "The Keras `tf.keras` is in the tasks: tf_keras trains with every strategy. Default: "
    "TF_USE_LEGACY_KERAS if set, else tf_keras where it is installed, else keras3 (as "
    "TensorFlow makes it). Either way, `import keras` code trains "
    "under multi-worker MultiWorkerMirroredStrategy (docs/guides/keras.md).")
_TRAINS_ALONE = flags.DEFINE_enum(
    "trains_alone", None, list(trains_alone.MODES), "A task whose script would train alone "
    "(MirroredStrategy, no strategy...) under the multi-worker cluster, and a job in which no "
    "two tasks joined a collective: warn (one line each) or error (the task stops; the job "
    "fails). Default: TFDIST_TRAINS_ALONE, else warn.")
_DATA_WORKERS = flags.DEFINE_integer(
    "data_workers", 0, "Start a tf.data service (a dispatcher and this many data workers) "
    "beside the tasks; trainers read through it with tfdist.data.service.distribute.",
    lower_bound=0)
_DATA_WORK_DIR = flags.DEFINE_string(
    "data_work_dir", None, "--data_workers: the dispatcher journals its state here, so that "
    "it is restarted without losing its jobs if it dies.")
_RAY = flags.DEFINE_string(
    "ray", None, "Run every task on a Ray cluster: --ray=ADDRESS (its head's host:port, or "
    "auto), --ray alone for RAY_ADDRESS, --ray=local to start one here for this job. Needs "
    "pip install 'ray>=2.60' (tfdist's `ray` extra).")
_RAY_CPUS = flags.DEFINE_float("ray_cpus_per_task", 1.0, "--ray: CPUs each task reserves "
                               "(workers and the chief also get a GPU where the cluster has "
                               "them).", lower_bound=0.001)
_RAY_RESOURCES = flags.DEFINE_multi_string(
    "ray_resources", [], "--ray: resources of one task type's bundles, replacing or adding to "
    "the defaults: TYPE:NAME=AMOUNT[,...], e.g. --ray_resources=worker:GPU=2,memory=8Gi or "
    "--ray_resources=ps:CPU=4,ps_node=1 (a custom resource). Repeatable.")
_MIN_WORKERS = flags.DEFINE_integer(
    "min_workers", None, "--ray, collective jobs: when a failure leaves room for fewer than "
    "--workers within --rescale_timeout, go on with as many as there is room for (at least "
    "this many) from the backup, and grow back when the cluster has room. Needs "
    "--max_restarts.", lower_bound=1)
_RESCALE_TIMEOUT = flags.DEFINE_float(
    "rescale_timeout", 60.0, "--min_workers: seconds to wait for every worker before going on "
    "with fewer.", lower_bound=0)
_RAY_PLACEMENT = flags.DEFINE_enum("ray_placement", "SPREAD", ["SPREAD", "PACK"],
                                   "--ray: spread the tasks over nodes, or pack them onto few.")
_SLURM = flags.DEFINE_bool("slurm", False, "Submit to SLURM with sbatch instead of running "
                           "locally. With --ps, task 0 is the chief.")
_TIME_MINUTES = flags.DEFINE_integer("time_minutes", 60, "--slurm: the job's time limit.",
                                     lower_bound=1)
_SBATCH_TEMPLATE = flags.DEFINE_string("sbatch_template", None, "--slurm: your own copy of "
                                       "launch/slurm/tfdist.sbatch.")
_KUBERNETES = flags.DEFINE_enum("kubernetes", None, sorted(kubernetes.MANIFESTS), "Print Kubernetes "
                                "manifests for this cluster instead of running it.")
_IMAGE = flags.DEFINE_string("image", None, "--kubernetes: the container image with your code.")
_NAME = flags.DEFINE_string("name", "tfdist", "--kubernetes: the job's name (a DNS label).")
_NAMESPACE = flags.DEFINE_string("namespace", kubernetes.NAMESPACE, "--kubernetes: the namespace.")
_RUN_AS_USER = flags.DEFINE_integer(
    "run_as_user", None, "--kubernetes: the user id the pods run as, for an image whose USER "
    "is root or unset (pods run as non-root). Default: the image's USER.", lower_bound=1)
_NETWORK_POLICY = flags.DEFINE_enum(
    "network_policy", "job", ["job", "none"], "--kubernetes: job: a NetworkPolicy admits "
    "traffic to the job's pods only from the job's own pods; none: no policy (a warning), "
    "for a namespace you isolate yourself.")
_WORK_DIR = flags.DEFINE_string("work_dir", None, "--slurm: where the sbatch script and the "
                                "job's output go (default: the current directory).")
_SBATCH_ARGS = flags.DEFINE_multi_string("sbatch", [], "--slurm: an extra #SBATCH directive, "
                                         "e.g. --sbatch=--partition=gpu (repeatable).")


def normalize_argv(argv):
  """`--ray` alone means "the cluster RAY_ADDRESS names": absl wants a value."""
  command_at = argv.index("--") if "--" in argv else len(argv)
  return [("--ray=" if a == "--ray" and i < command_at else a) for i, a in enumerate(argv)]


def main(argv):
  command = argv[1:]
  if not command:
    print("tfdist launch: give the command after '--', e.g. "
          "`tfdist launch --workers 2 -- python train.py`. Received: no command",
          file=sys.stderr)
    return 2
  try:
    job = launch_lib.Job(workers=_WORKERS.value, ps=_PS.value, chief=_CHIEF.value,
                         evaluator=_EVALUATOR.value, data_workers=_DATA_WORKERS.value)
    name = _backend()
    if name in ("local", "slurm"):  # As the launcher would refuse it, with the flag's name.
      task_keras.resolve_here(_KERAS.value)
    options = launch_lib.LaunchOptions(
        timeout=_TIMEOUT.value, max_restarts=_MAX_RESTARTS.value,
        grace_period=_GRACE_PERIOD.value, keras=_KERAS.value,
        stall_timeout=_STALL_TIMEOUT.value, profile=_PROFILE.value,
        profile_dir=_PROFILE_DIR.value, trains_alone=_TRAINS_ALONE.value,
        data_work_dir=_DATA_WORK_DIR.value)
    code = launch_lib.make_launcher(name, options, **_BACKEND_OPTIONS[name]()).launch(command,
                                                                                     job)
  except (launch_lib.LaunchError, ValueError) as e:
    print(f"tfdist launch: {e}", file=sys.stderr)
    return getattr(e, "exit_code", 2)
  # A task killed by signal N exits the launcher with 128 + N, as shells do.
  exit_code = code if code >= 0 else 128 - code
  # A manifest's pods trace into their own file systems: no folder here to summarize.
  if options.profile and name != "kubernetes":
    for line in profile_summary.report(options.profile, os.path.abspath(options.profile_dir),
                                       exit_code):
      print(f"[tfdist launch] {line}")
  return exit_code


def _backend() -> str:
  """The registered launcher the flags choose: one engine at most, else local."""
  chosen = [name for name, given in (("slurm", _SLURM.value), ("ray", _RAY.present),
                                     ("kubernetes", bool(_KUBERNETES.value))) if given]
  if len(chosen) > 1:  # Each is a different engine: one would be silently ignored.
    flags_given = " and ".join(f"--{name}" for name in chosen)
    raise ValueError(f"{flags_given} each choose where the job runs: give one of them. "
                     f"Received: {' '.join('--' + name for name in chosen)}")
  if _MIN_WORKERS.value is not None and chosen != ["ray"]:
    raise ValueError("--min_workers needs --ray: only a Ray cluster can place the workers "
                     "elsewhere and grow the job back. Received: --min_workers="
                     f"{_MIN_WORKERS.value} without --ray")
  return chosen[0] if chosen else "local"


# Each backend's own options, from its flags (the shared ones are LaunchOptions).
_BACKEND_OPTIONS = {
    "local": lambda: dict(network=_NETWORK.value),
    "slurm": lambda: dict(workdir=_WORK_DIR.value, time_minutes=_TIME_MINUTES.value,
                          template=_SBATCH_TEMPLATE.value, extra_directives=_SBATCH_ARGS.value),
    "ray": lambda: dict(address=_RAY.value or None, cpus_per_task=_RAY_CPUS.value,
                        resources=ray_launch.parse_resources(_RAY_RESOURCES.value),
                        placement=_RAY_PLACEMENT.value, min_workers=_MIN_WORKERS.value,
                        rescale_timeout=_RESCALE_TIMEOUT.value),
    "kubernetes": lambda: dict(kind=_KUBERNETES.value, image=_IMAGE.value, name=_NAME.value,
                               namespace=_NAMESPACE.value, run_as_user=_RUN_AS_USER.value,
                               network_policy=_NETWORK_POLICY.value != "none"),
}
