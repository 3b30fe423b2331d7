"""`tfdist launch --workers 2 -- python train.py --epochs 3`

Starts a local cluster on free loopback ports: one process per task, each with
its TF_CONFIG, output prefixed with the task. Exits with the cluster's code.

With --slurm, submits the same job to SLURM instead (one SLURM task per TF
task, see launch/slurm/tfdist.sbatch), streams its output and exits with
the job's exit code.

With --ray[=ADDRESS], runs every task on a Ray cluster (see tfdist.launch._ray).

With --kubernetes=jobset|trainjob|tfjob|indexed, prints the manifests for
`kubectl apply -f -` (a JobSet; Kubeflow Trainer v2's runtime and TrainJob; a
Kubeflow TFJob; or Indexed Jobs plus a headless Service) and starts nothing.
"""

import os
import signal
import sys

from absl import flags

from tfdist import launch as launch_lib
from tfdist import progress
from tfdist.launch import _kubernetes as kubernetes
from tfdist.launch import private_network
from tfdist.launch import _profile_summary as profile_summary
from tfdist.launch import _ray as ray_launch
from tfdist.launch import _slurm as slurm
from tfdist.launch import _task_keras as task_keras
from tfdist.launch import _trains_alone as trains_alone
from tfdist.launch import watchdog

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
    "TF_USE_LEGACY_KERAS if set, else tf_keras. Either way, `import keras` code trains "
    "under multi-worker MultiWorkerMirroredStrategy (README: Which Keras).")
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
_NAMESPACE = flags.DEFINE_string("namespace", "default", "--kubernetes: the namespace.")
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
  job = launch_lib.Job(workers=_WORKERS.value, ps=_PS.value, chief=_CHIEF.value,
                       evaluator=_EVALUATOR.value, data_workers=_DATA_WORKERS.value)
  try:
    variables = _task_variables()
    # A manifest's pods trace into their own file systems: no folder here to summarize.
    profile_dir = None if _KUBERNETES.value else variables.get(progress.PROFILE_DIR_ENV)
    launcher = _launcher(variables)
    code = launcher.launch(command, job)
  except launch_lib.LaunchError as e:
    print(f"tfdist launch: {e}", file=sys.stderr)
    return 127
  except private_network.Unavailable as e:
    print(f"tfdist launch: {e}", file=sys.stderr)
    return 2
  except ray_launch.RayUnavailable as e:
    print(f"tfdist launch: {e}", file=sys.stderr)
    return 2
  except slurm.SlurmError as e:
    print(f"tfdist launch: {e}", file=sys.stderr)
    return 1
  except ValueError as e:
    print(f"tfdist launch: {e}", file=sys.stderr)
    return 2
  # A task killed by signal N exits the launcher with 128 + N, as shells do.
  exit_code = code if code >= 0 else 128 - code
  if profile_dir:
    runs = sorted(os.listdir(profile_dir)) if os.path.isdir(profile_dir) else []
    print(f"[tfdist launch] profile of steps {_PROFILE.value}: {profile_dir}, one run per task: "
          f"{runs or 'none written (did the job reach those steps?)'}. View it with `tensorboard "
          f"--logdir {profile_dir}` (pip install tensorboard tensorboard-plugin-profile) or xprof.")
    if runs:
      _print_profile_summary(profile_dir)
    if exit_code in _CRASHED:
      print("[tfdist launch] a task ended with SIGABRT or SIGSEGV in a job traced with "
            "--profile: TensorFlow 2.21's profiler can corrupt a task's memory when it collects "
            "the trace of a multi-worker job (docs/known_issues.md, \"TF's profiler in a "
            "multi-worker job\"). Run the job again, or trace fewer steps; a job that keeps a "
            f"backup resumes from it under --max_restarts. Received: exit code {exit_code}")
  return exit_code


# A task killed by SIGABRT or SIGSEGV, as the launch's exit code (128 + N).
_CRASHED = (128 + signal.SIGABRT, 128 + signal.SIGSEGV)


def _task_variables() -> dict:
  """What the tasks read from their environment, on every launcher that passes one on:
  --trains_alone, --stall_timeout (on Ray and in pods each task's wrapper watches it,
  `tfdist task`), and --profile with its absolute directory."""
  variables = {}
  if _TRAINS_ALONE.value:
    variables[trains_alone.TRAINS_ALONE_ENV] = _TRAINS_ALONE.value
  if _STALL_TIMEOUT.value is not None:
    variables[watchdog.STALL_TIMEOUT_ENV] = f"{_STALL_TIMEOUT.value:g}"
  if _PROFILE.value:
    progress.parse_steps(_PROFILE.value)  # A ValueError names the form.
    variables[progress.PROFILE_ENV] = _PROFILE.value
    # In a pod, the path is the pod's (relative to its working directory), not this machine's.
    variables[progress.PROFILE_DIR_ENV] = (_PROFILE_DIR.value if _KUBERNETES.value
                                           else os.path.abspath(_PROFILE_DIR.value))
  return variables


def _print_profile_summary(profile_dir: str) -> None:
  """The per-task table of the profiled steps, and the straggler if one stands out."""
  try:
    rows = profile_summary.summarize(profile_dir)
  except Exception as e:  # pylint: disable=broad-except  The job's exit code stands.
    print(f"[tfdist launch] no per-task summary of the profile: {e!r}")
    return
  if rows:
    print("[tfdist launch] per task, per profiled step:\n" + profile_summary.table(rows))
    line = profile_summary.straggler(rows)
    if line:
      print(f"[tfdist launch] {line}")


def _launcher(variables) -> launch_lib.Launcher:
  """The launcher the flags choose, with its own options; its tasks get `variables` beside
  this machine's environment (a manifest's pods get `variables` alone)."""
  env = {**os.environ, **variables}
  chosen = [name for name, given in (("--slurm", _SLURM.value), ("--ray", _RAY.present),
                                     ("--kubernetes", bool(_KUBERNETES.value))) if given]
  if len(chosen) > 1:  # Each is a different engine: one would be silently ignored.
    raise ValueError(f"{' and '.join(chosen)} each choose where the job runs: give one of them. "
                     f"Received: {' '.join(chosen)}")
  if _SLURM.value:
    return launch_lib.make_launcher(
        "slurm", timeout=_TIMEOUT.value, workdir=_WORK_DIR.value,
        time_minutes=_TIME_MINUTES.value, template=_SBATCH_TEMPLATE.value,
        extra_directives=_SBATCH_ARGS.value, keras=_KERAS.value,
        data_work_dir=_DATA_WORK_DIR.value, max_restarts=_MAX_RESTARTS.value, env=env)
  if _RAY.present:
    return launch_lib.make_launcher(
        "ray", address=_RAY.value or None, timeout=_TIMEOUT.value,
        max_restarts=_MAX_RESTARTS.value, grace_period=_GRACE_PERIOD.value,
        keras=_KERAS.value, cpus_per_task=_RAY_CPUS.value,
        resources=ray_launch.parse_resources(_RAY_RESOURCES.value),
        placement=_RAY_PLACEMENT.value, min_workers=_MIN_WORKERS.value,
        rescale_timeout=_RESCALE_TIMEOUT.value, data_work_dir=_DATA_WORK_DIR.value, env=env)
  if _MIN_WORKERS.value is not None:
    raise ValueError("--min_workers needs --ray: only a Ray cluster can place the workers "
                     "elsewhere and grow the job back. Received: --min_workers="
                     f"{_MIN_WORKERS.value} without --ray")
  if _KUBERNETES.value:
    return launch_lib.make_launcher("kubernetes", kind=_KUBERNETES.value, image=_IMAGE.value,
                                    name=_NAME.value, namespace=_NAMESPACE.value,
                                    run_as_user=_RUN_AS_USER.value,
                                    network_policy=_NETWORK_POLICY.value != "none",
                                    keras=_KERAS.value, data_work_dir=_DATA_WORK_DIR.value,
                                    max_restarts=_MAX_RESTARTS.value, env=variables)
  return launch_lib.make_launcher("local", timeout=_TIMEOUT.value,
                                  max_restarts=_MAX_RESTARTS.value, network=_NETWORK.value,
                                  grace_period=_GRACE_PERIOD.value, keras=_KERAS.value,
                                  data_work_dir=_DATA_WORK_DIR.value,
                                  stall_timeout=_STALL_TIMEOUT.value, env=env)
