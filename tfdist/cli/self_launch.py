"""The self-launch pattern of `tfdist train`, `bench` and `scale`, written once.

A command that needs a local cluster runs twice: first as the user started it,
where it launches a local cluster whose every task runs the same command
again with the same flags; then as each task, which finds itself inside a
cluster (TF_CONFIG, or any environment `tfdist.cluster` detects) and does the
work. A task can hand a result back: the first worker (or the chief) writes
JSON to the path given in an internal flag of the command (`--result_file`,
or the one it names), which the launching process reads once the cluster is
done.

Example (in an absl main):

>>> if self_launch.in_cluster():
...   return _work()                       # one task
>>> result = self_launch.run_for_result("scale", sys.modules[__name__], spec)
"""

import json
import os
import sys
from types import ModuleType
from typing import Any, List, Optional, Sequence, TextIO

from absl import flags

from tfdist import launch as launch_lib
from tfdist.cluster import CHIEF, WORKER, ClusterSpec, TaskSpec
from tfdist.cluster import environment
from tfdist.task import _result_channel as result_channel

# The reporting task writes its result as JSON here: the internal flag of the
# commands that launch themselves (their users' JSON goes to --output).
RESULT_FLAG = "result_file"


def in_cluster() -> bool:
  """Whether this process is a task of a cluster (TF_CONFIG, Kubernetes, SLURM)."""
  return environment.detect() is not None


def launched_by_itself(result_path: Optional[str]) -> bool:
  """Whether this process is a task its own command launched (given its internal result flag).

  For commands that always measure on a cluster of their own (`scale`,
  `advise`, `bench`): run inside a SLURM allocation, a Kubernetes pod or with
  TF_CONFIG set, they must still launch their own, not take themselves for a
  task of the job around them.
  """
  return result_path is not None


def command(name: str, module: ModuleType, extra_flags: Sequence[str] = ()) -> List[str]:
  """`python -m tfdist <name>` with every flag of `module` the user set, then `extra_flags`."""
  own = []
  for flag in flags.FLAGS.get_key_flags_for_module(module):
    if flag.name != RESULT_FLAG and (flag.present or flag.value != flag.default):
      # A repeated flag serializes as one "--name=value" line per value.
      own += [line for line in flag.serialize().split("\n") if line]
  return [sys.executable, "-m", "tfdist", name] + own + list(extra_flags)


def run(name: str, module: ModuleType, spec: ClusterSpec, *, timeout: float,
        extra_flags: Sequence[str] = (), max_restarts: int = 0,
        output: Optional[TextIO] = None, keras: Optional[str] = None) -> int:
  """Runs `tfdist <name>` with the same flags as every task of `spec`; its exit code.

  `keras`: the tasks' Keras (see `tfdist.task._keras`).
  """
  options = launch_lib.LaunchOptions(timeout=timeout, max_restarts=max_restarts,
                                     output=output, keras=keras)
  return launch_lib.launch_local(command(name, module, extra_flags), spec, options)


def run_for_result(name: str, module: ModuleType, spec: ClusterSpec, *, timeout: float,
                   extra_flags: Sequence[str] = (),
                   result_flag: str = RESULT_FLAG) -> Optional[Any]:
  """Like `run`, quietly, and returns what the writing task passed to `write_result`.

  `result_flag`: the command's internal flag the task is given the path in.
  Returns None, after printing the command that shows the cluster's output,
  when the cluster failed or wrote nothing; or after printing why the cluster
  could not start (e.g. TF_USE_LEGACY_KERAS=1 where tf_keras is not installed).
  """
  try:
    with open(os.devnull, "w") as quiet:
      code, result = result_channel.run_for_json(lambda path: run(
          name, module, spec, timeout=timeout, output=quiet,
          extra_flags=[*extra_flags, f"--{result_flag}={path}"]))
  except ValueError as e:  # Refused before any task started: the reason, in one line.
    print(f"tfdist {name}: {e}", file=sys.stderr)
    return None
  if result is None:
    shown = " ".join(command(name, module, extra_flags)[1:])
    print(f"tfdist {name}: the {spec.num_workers}-worker cluster failed (exit code {code}); "
          f"run `tfdist launch --workers {spec.num_workers} -- python {shown}` to see why.",
          file=sys.stderr)
  return result


def is_writer(spec: Optional[ClusterSpec]) -> bool:
  """Whether this task reports: the chief, or worker 0 when there is no chief."""
  if spec is None or spec.task is None:
    return True
  if CHIEF in spec.jobs:
    return spec.task.type == CHIEF
  return spec.task == TaskSpec(WORKER, 0)


def write_result(path: Optional[str], result: Any) -> None:
  """Writes `result` as JSON to `path` if given and this task is the writer."""
  if path and is_writer(ClusterSpec.from_env()):
    with open(path, "w") as f:
      json.dump(result, f, indent=1)
