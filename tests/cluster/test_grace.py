"""tfdist.cluster._grace: the grace period a task is told, and seconds that are not seconds."""

import pytest

from tfdist.cluster import _grace as grace


def test_a_grace_period_that_is_not_seconds_is_refused():
  assert grace.grace_period({}) == (30.0, "SLURM's and Kubernetes' default")
  assert grace.grace_period({"TFDIST_GRACE_PERIOD": "15"}) == (15.0, "TFDIST_GRACE_PERIOD")
  for bad in ("15s", "0", "-3", "nan"):
    with pytest.raises(ValueError, match=r"`TFDIST_GRACE_PERIOD` must be a number of seconds "
                                         rf"> 0, e.g. 30. Received: '{bad}'$"):
      grace.grace_period({"TFDIST_GRACE_PERIOD": bad})
