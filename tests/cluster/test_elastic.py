"""tfdist.cluster._elastic: the replicas a job asked for, when its launcher runs fewer workers."""

import json

import pytest

from tfdist.cluster import _elastic as elastic


def _environ(workers, asked=None, chief=False):
  cluster = {"worker": [f"h{i}:1" for i in range(workers)]}
  if chief:
    cluster["chief"] = ["c:1"]
  environ = {"TF_CONFIG": json.dumps({"cluster": cluster,
                                      "task": {"type": "worker", "index": 0}})}
  if asked is not None:
    environ[elastic.WORKERS_ASKED_ENV] = str(asked)
  return environ


def test_replicas_asked_scale_the_replicas_now_to_the_workers_asked():
  assert elastic.replicas_asked(2, _environ(1, asked=2)) == 4  # 2 replicas a worker.
  assert elastic.replicas_asked(3, _environ(2, asked=4, chief=True)) == 4
  assert elastic.replicas_asked(2, _environ(2, asked=2)) == 2
  assert elastic.replicas_asked(2, _environ(1)) == 2  # Never told: as it is.
  assert elastic.replicas_asked(1, {}) == 1
  assert elastic.workers_asked({}) is None


@pytest.mark.parametrize("value", ["0", "two", "-1", ""])
def test_a_bad_workers_asked_is_a_one_line_error(value):
  with pytest.raises(ValueError, match=r"`TFDIST_WORKERS_ASKED` must be the number of workers "
                     r"the job asked for, an integer >= 1. Received: " + repr(value) + "$"):
    elastic.workers_asked({elastic.WORKERS_ASKED_ENV: value})
