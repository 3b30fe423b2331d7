"""A task's seconds between SIGTERM and SIGKILL, as the launcher tells it.

`tfdist launch --grace_period` sets `TFDIST_GRACE_PERIOD` for its tasks, so
that a task's backup after SIGTERM can be checked against it
(`tfdist.training.checkpoints`); elsewhere a task assumes the 30 s that SLURM
(`KillWait`) and Kubernetes (`terminationGracePeriodSeconds`) give by default.
GKE Spot gives 15 s. No TensorFlow here: the launcher imports it too.
"""

import os
from typing import Mapping, Optional, Tuple

from tfdist import _variables as variables

GRACE_PERIOD_ENV = variables.GRACE_PERIOD
DEFAULT_GRACE_PERIOD = 30.0


def positive_seconds(value, source: str) -> float:
  """`value` (a number or its text) as seconds > 0.

  Raises:
    ValueError: naming `source` (a field or a variable) and the value received.
  """
  try:
    seconds = float(value)
  except (TypeError, ValueError):
    seconds = float("nan")
  if not seconds > 0:
    raise ValueError(f"`{source}` must be a number of seconds > 0, e.g. 30. "
                     f"Received: {value!r}")
  return seconds


def grace_period(environ: Optional[Mapping[str, str]] = None) -> Tuple[float, str]:
  """(seconds between SIGTERM and SIGKILL, where that came from) for this task.

  Raises:
    ValueError: `TFDIST_GRACE_PERIOD` is not a number of seconds > 0.
  """
  environ = os.environ if environ is None else environ
  if GRACE_PERIOD_ENV not in environ:
    return DEFAULT_GRACE_PERIOD, "SLURM's and Kubernetes' default"
  return positive_seconds(environ[GRACE_PERIOD_ENV], GRACE_PERIOD_ENV), GRACE_PERIOD_ENV
