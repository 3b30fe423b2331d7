"""Tasks that share a machine share its cores: each task's TensorFlow thread pools, sized to its share.

TensorFlow sizes its intra-op pool (the threads one op splits its work over)
and its inter-op pool (ops that run at once) to every core of the machine. Two
tasks on one machine then run twice as many busy threads as there are cores,
and each slows the other (torchrun sets `OMP_NUM_THREADS=1` per process for the
same reason). The local launcher gives every task `cores // tasks` threads in
each pool, at least one, through the variables TensorFlow reads when it starts
(`TF_NUM_INTRAOP_THREADS`, `TF_NUM_INTEROP_THREADS`: measured here, a task with
both at 1 runs one `tf_Compute` thread where it ran two), unless the user set
them: a variable already in the environment is left as it is, and a program's
own `tf.config.threading` settings still win over both.

Under parameter servers only the intra-op pool is shared out: a worker's
inter-op threads also carry the blocking ops of the coordinator's closures, and
too few of them hang it (docs/known_issues.md: an in-process cluster needs
`inter_op_parallelism_threads >= workers + 1`).

Example:

    >>> spec = tfdist.ClusterSpec.local(workers=2)
    >>> thread_variables(spec, {}, cores=2)
    {'TF_NUM_INTRAOP_THREADS': '1', 'TF_NUM_INTEROP_THREADS': '1'}
"""

import logging
import os
from typing import Dict, Mapping, Optional, Tuple

from tfdist import cluster as cluster_lib

logger = logging.getLogger("tfdist")

INTRA_OP_ENV = "TF_NUM_INTRAOP_THREADS"
INTER_OP_ENV = "TF_NUM_INTEROP_THREADS"


def available_cores() -> int:
  """The cores this process may run on (its CPU affinity, else the machine's)."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # Not on Linux.
    return os.cpu_count() or 1


def thread_variables(spec: cluster_lib.ClusterSpec, env: Mapping[str, str], *,
                     cores: Optional[int] = None) -> Dict[str, str]:
  """The thread-pool variables to give every task of `spec`, all on this machine.

  Args:
    spec: the cluster; each of its tasks is a process here.
    env: the tasks' environment: a variable already in it is the user's choice,
      and is not returned.
    cores: the cores the tasks share (default: `available_cores()`).

  Returns:
    {variable: threads} for the pools not set by the user; empty for a
    one-task spec, or when the user set every pool.
  """
  return _shares(spec, env, cores)[2]


def share_cores(spec: cluster_lib.ClusterSpec, env: Mapping[str, str], *,
                cores: Optional[int] = None) -> Dict[str, str]:
  """`env` with each task's share of the threads (`thread_variables`), said once in the log."""
  tasks, cores, shares = _shares(spec, env, cores)
  if shares:
    logger.info("tfdist: %d tasks share this machine's %d cores: each gets %s (set them in "
                "the environment to choose otherwise)", tasks, cores,
                " ".join(f"{k}={v}" for k, v in shares.items()))
  return {**env, **shares}


def _shares(spec, env, cores) -> Tuple[int, int, Dict[str, str]]:
  """(tasks, cores, the variables of `thread_variables`), counted once."""
  tasks = sum(1 for _ in spec.tasks())
  cores = available_cores() if cores is None else cores
  if tasks < 2:
    return tasks, cores, {}
  share = str(max(1, cores // tasks))
  names = [INTRA_OP_ENV] if cluster_lib.PS in spec.jobs else [INTRA_OP_ENV, INTER_OP_ENV]
  return tasks, cores, {name: share for name in names if name not in env}
