"""tfdist.training.preemption: when a running job checks for SIGTERM, and what the workers agree.

The SIGTERM saves themselves are tested end to end with both Kerases' backups
(tests/training/test_checkpoints.py) and the loop (tests/training/test_loop.py).
"""

import time

import pytest

import tfdist
from tfdist.training import preemption


def test_the_first_check_comes_at_the_next_step_then_at_the_pace_measured():
  schedule = preemption.Schedule(None, check_seconds=0.2)
  schedule.restart(10)
  assert not schedule.due(10) and schedule.due(11)
  time.sleep(0.1)  # 1 step in about 0.1 s: the next check about 0.2 s on, at step 11 + 2.
  assert schedule.agreed(False, 11) is False
  assert schedule.next in (12, 13)
  assert schedule.agreed(True, 13) is True


def test_every_n_steps_and_at_an_epochs_end_nothing_is_rescheduled():
  schedule = preemption.Schedule(None, check_every=5)
  assert schedule.next == 5
  schedule.agreed(False, 5)
  assert schedule.next == 10
  assert schedule.agreed(True, None) is True and schedule.next == 10


def test_workers_agree_through_one_all_reduce():
  # Two replicas: the flag of either is everyone's; the seconds are the mean.
  strategy = tfdist.make_strategy("mirrored")
  agree = preemption.any_worker(strategy)
  assert agree(1.0, 3.0) == (True, 3.0)
  assert agree(0.0, 3.0) == (False, 3.0)


@pytest.mark.parametrize("kwargs, match", [
    ({"check_every": 0}, r"`check_every` must be an integer >= 1.*Received: check_every=0"),
    ({"check_every": True}, r"Received: check_every=True"),
    ({"check_seconds": 0}, r"`check_seconds` must be > 0. Received: check_seconds=0"),
])
def test_bad_arguments_name_the_field(kwargs, match):
  with pytest.raises(ValueError, match=match):
    preemption.Schedule(None, **kwargs)
