"""Every `TFDIST_*` environment variable, declared once: who sets it, who reads it, its meaning.

A launcher reaches its tasks, and a user reaches tfdist inside them, through
the environment: a child process inherits it where no argument can reach. Each
variable is declared here, and the module that reads it names it through its
constant. `tests/test_architecture.py` fails on a `"TFDIST_..."` string
anywhere else in tfdist, and checks docs/reference/environment.md's table against
`VARIABLES`.

Example:

    >>> from tfdist import _variables
    >>> _variables.STALL_TIMEOUT
    'TFDIST_STALL_TIMEOUT'
    >>> [v.name for v in _variables.VARIABLES if v.set_by == "you"][:2]
    ['TFDIST_STALL_TIMEOUT', 'TFDIST_BOUNDARY_SECONDS']
"""

import dataclasses
from typing import List


@dataclasses.dataclass(frozen=True)
class Variable:
  """One environment variable.

  Attributes:
    name: "TFDIST_...".
    set_by: "you" (a user's choice) or the module that sets it for a child process.
    read_by: the module that reads it.
    meaning: what it holds, and what unset means.
  """
  name: str
  set_by: str
  read_by: str
  meaning: str


VARIABLES: List[Variable] = []


def _declare(name: str, set_by: str, read_by: str, meaning: str) -> str:
  VARIABLES.append(Variable(name, set_by, read_by, meaning))
  return name


# A user's choices (docs/guides name each).
STALL_TIMEOUT = _declare(
    "TFDIST_STALL_TIMEOUT", "you", "launch.watchdog",
    "seconds without a step anywhere before a job is stalled (default 300); "
    "`tfdist launch --stall_timeout` sets it for its tasks")
BOUNDARY_SECONDS = _declare(
    "TFDIST_BOUNDARY_SECONDS", "you", "launch.watchdog",
    "the least limit of a first step, and of start-up (default 60)")
NETWORK = _declare(
    "TFDIST_NETWORK", "you", "launch.private_network",
    "where a command that starts a cluster itself runs it: `loopback`, `host` or `auto` "
    "(default)")
TRAINS_ALONE = _declare(
    "TFDIST_TRAINS_ALONE", "you", "task._trains_alone",
    "`warn` (default) or `error` for a task that trains alone under a multi-worker TF_CONFIG")
PREFLIGHT_TIMEOUT = _declare(
    "TFDIST_PREFLIGHT_TIMEOUT", "you", "cluster.preflight",
    "seconds to wait for every task of the cluster before a strategy is built")
GRACE_PERIOD = _declare(
    "TFDIST_GRACE_PERIOD", "you", "cluster._grace",
    "a task's seconds between SIGTERM and SIGKILL; the launcher sets it to its --grace_period")
CHECK_WORKERS = _declare(
    "TFDIST_CHECK_WORKERS", "you", "strategies._fingerprint",
    "`0`: workers are not compared before their first collective")
STEPS_PUBLISHED = _declare(
    "TFDIST_STEPS_PUBLISHED", "you", "task.progress",
    "`0`: no task publishes its step times through TensorFlow's coordination service")
INPUT_WAIT = _declare(
    "TFDIST_INPUT_WAIT", "you", "task.progress",
    "`0`: no input stamp, step times only")
STATUS_SECONDS = _declare(
    "TFDIST_STATUS_SECONDS", "you", "task.progress",
    "seconds between a launched task's status lines during a Keras epoch; `0`: none")

# From a launcher to its tasks.
PROGRESS_DIR = _declare(
    "TFDIST_PROGRESS_DIR", "launch._supervision", "task.progress",
    "the folder where a task writes its steps for the launcher's stall watchdog")
PROFILE = _declare(
    "TFDIST_PROFILE", "launch._launcher", "task.progress",
    "`FIRST-LAST`: the steps each task traces with TensorFlow's profiler")
PROFILE_DIR = _declare(
    "TFDIST_PROFILE_DIR", "launch._launcher", "task.progress", "where each task writes its trace")
STEPS_SHARED_DIR = _declare(
    "TFDIST_STEPS_SHARED_DIR", "launch.watchdog", "task.progress",
    "a folder the nodes share, holding every task's row of step times (SLURM)")
WORKERS_ASKED = _declare(
    "TFDIST_WORKERS_ASKED", "launch.ray._launcher", "cluster._elastic",
    "the workers a job asked for, when its launcher runs fewer")
JOINED_DIR = _declare(
    "TFDIST_JOINED_DIR", "task._trains_alone", "task._trains_alone",
    "the folder where tasks record that they joined a collective")
DATA_SERVICE = _declare(
    "TFDIST_DATA_SERVICE", "cluster._data_service", "cluster._data_service",
    "the tf.data service's dispatcher address, for the trainers")
DATA_SERVICE_JOB = _declare(
    "TFDIST_DATA_SERVICE_JOB", "cluster._data_service", "cluster._data_service",
    "the tf.data service's job name, shared by the trainers")
NODE_ADDRESS = _declare(
    "TFDIST_NODE_ADDRESS", "launch.ray._launcher", "data.service",
    "the address of the machine a tf.data server runs on (a Ray node)")
SLURM_PORT_BASE = _declare(
    "TFDIST_SLURM_PORT_BASE", "you", "cluster._slurm",
    "the first port of the tasks of a SLURM job without reserved ports")
SLURM_NUM_PS = _declare(
    "TFDIST_SLURM_NUM_PS", "launch.slurm._launcher", "cluster._slurm",
    "how many of a SLURM job's tasks are parameter servers")
SLURM_LOOPBACK = _declare(
    "TFDIST_SLURM_LOOPBACK", "launch.slurm._launcher", "cluster._slurm",
    "`1`: the tasks share one node's private network and meet on loopback")
CLUSTER_SHAPE = _declare(
    "TFDIST_CLUSTER_SHAPE", "launch.kubernetes._jobset", "cluster._jobset",
    "the jobs of a JobSet's pods and their counts, e.g. chief=1,worker=2,ps=1")
PORT = _declare(
    "TFDIST_PORT", "launch.kubernetes._jobset", "cluster._jobset", "the port every pod's task listens on")
FUNCTION = _declare(
    "TFDIST_FUNCTION", "launch._notebook", "task._notebook",
    "the name of the function a notebook launch runs in each task")
FUNCTION_SOURCE = _declare(
    "TFDIST_FUNCTION_SOURCE", "launch._notebook", "task._notebook",
    "the source that defines that function")
RESULT_TASK = _declare(
    "TFDIST_RESULT_TASK", "task._result_channel", "task._notebook",
    "the task whose return value comes back: `chief:0` or `worker:0`")
RESULT_FILE = _declare(
    "TFDIST_RESULT_FILE", "task._result_channel", "task._notebook",
    "where that task writes it, in a folder made for the launch")
RAY_PLACEMENT_GROUP = _declare(
    "TFDIST_RAY_PLACEMENT_GROUP", "launch.ray._launcher", "launch.ray._task",
    "the Ray placement group of the job's tasks")
RAY_BUNDLES = _declare(
    "TFDIST_RAY_BUNDLES", "launch.ray._launcher", "launch.ray._task", "each task's bundle in it, as JSON")
RAY_TASK = _declare(
    "TFDIST_RAY_TASK", "launch.ray._launcher", "launch.ray._task",
    "which task this process is: `worker:1`, `dispatcher:0`")
IN_PRIVATE_NETWORK = _declare(
    "TFDIST_IN_PRIVATE_NETWORK", "cli.train", "cli.train",
    "`1` in the copy of `tfdist train` that runs inside the private network")
