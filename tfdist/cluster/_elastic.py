"""A job running on fewer workers than it asked for, as `tfdist launch --min_workers` allows.

When a collective job cannot get all its workers back after a failure, the
Ray launcher resumes it on as many as it can (at least `--min_workers`) and
grows it back later. Each task's `TF_CONFIG` says how many workers run now;
`TFDIST_WORKERS_ASKED` says how many the job asked for. A training program
keeps its global batch (each replica's share grows) and its learning rate as
for the replicas asked, so that the run goes on as the same optimisation:
`tfdist train` does both and says so. No TensorFlow here: the launcher
imports it too.
"""

import os
from typing import Mapping, Optional

from tfdist import _variables as variables
from tfdist.cluster import _spec as spec_lib

WORKERS_ASKED_ENV = variables.WORKERS_ASKED


def workers_asked(environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
  """The workers (and chief) the job asked for, when its launcher may run fewer; else None.

  Raises:
    ValueError: `TFDIST_WORKERS_ASKED` is not an integer >= 1.
  """
  environ = os.environ if environ is None else environ
  value = environ.get(WORKERS_ASKED_ENV)
  if value is None:
    return None
  if not value.isdigit() or int(value) < 1:
    raise ValueError(f"`{WORKERS_ASKED_ENV}` must be the number of workers the job asked "
                     f"for, an integer >= 1. Received: {value!r}")
  return int(value)


def replicas_asked(replicas: int, environ: Optional[Mapping[str, str]] = None) -> int:
  """The replicas in sync the job asked for: `replicas` (now) scaled to the workers asked.

  Every worker has as many replicas as the others, so the replicas asked are
  `replicas / workers now * workers asked`; `replicas` itself when the job
  runs on all it asked for, or was never told (no `TFDIST_WORKERS_ASKED`).

  Example:

      >>> environ = {"TFDIST_WORKERS_ASKED": "2",
      ...            "TF_CONFIG": '{"cluster": {"worker": ["h:1"]}, '
      ...                         '"task": {"type": "worker", "index": 0}}'}
      >>> replicas_asked(1, environ)
      2
  """
  environ = os.environ if environ is None else environ
  asked = workers_asked(environ)
  spec = spec_lib.ClusterSpec.from_env(environ) if asked else None
  now = spec_lib.count_workers(spec.jobs) if spec is not None else 0
  if not asked or not now or now == asked:
    return replicas
  return replicas // now * asked
