"""Preemption: SIGTERM to any worker, a save on every worker at the same step, exit 143.

SLURM and Kubernetes send SIGTERM, then SIGKILL after a grace period
(`tfdist.cluster._grace`). A running job checks for it about every
`CHECK_SECONDS` of training (or every `check_every` steps), so that the save
fits in the grace period however long a step takes. Under
MultiWorkerMirroredStrategy the workers agree at each check through one small
all-reduce (`any_worker`), so a SIGTERM to any one of them makes all of them
save at the same step, and all of them derive the next check from the same
reduced timing. Both Kerases' backups (`tfdist.training.checkpoints`) and the
custom loop (`tfdist.training.loop`) check through a `Schedule`.

Example:

    >>> schedule = Schedule(agree=None)          # one process: nothing to agree through
    >>> schedule.restart(step=0)
    >>> if schedule.due(step) and schedule.agreed(received_sigterm, step):
    ...   save(); raise SystemExit(PREEMPTED_EXIT_CODE)
"""

import signal
import time
from typing import Callable, Optional, Tuple

import tensorflow as tf

# Exit code of a task that saved after SIGTERM: 128 + SIGTERM, as a shell
# reports a process ended by it; launchers treat it as "preempted".
PREEMPTED_EXIT_CODE = 128 + signal.SIGTERM
# Seconds of training between two checks (one all-reduce each under
# multi-worker mirrored): short enough that a save fits a grace period.
CHECK_SECONDS = 1.0
Agree = Callable[[float, float], Tuple[bool, float]]


def any_worker(strategy: tf.distribute.Strategy) -> Agree:
  """A function: (whether any worker's flag is set, the workers' mean of `seconds`).

  One all-reduce of two scalars per check; every worker gets the same answer.
  """

  @tf.function
  def agree(flag, seconds):
    values = tf.stack([flag, seconds])
    total = strategy.run(lambda x: tf.distribute.get_replica_context().all_reduce(
        tf.distribute.ReduceOp.SUM, tf.identity(x)), args=(values,))
    return strategy.experimental_local_results(total)[0]

  def run(flag: float, seconds: float):
    total = agree(tf.constant(flag), tf.constant(seconds)).numpy()
    return bool(total[0] > 0), float(total[1]) / strategy.num_replicas_in_sync

  return run


def check(agree: Optional[Agree], received: bool, done: int, elapsed: float,
          check_seconds: float) -> Tuple[bool, int]:
  """At a check: (whether any worker got SIGTERM, steps until the next check).

  `done` steps took `elapsed` seconds since the last check; the next comes
  about `check_seconds` from now, at this pace. `agree` (from `any_worker`, or
  None in one process) gives every worker the same answers, so all of them
  check at the same steps.
  """
  if agree is not None:
    received, elapsed = agree(float(received), elapsed)
  return received, max(1, min(1000, int(check_seconds * done / max(elapsed, 1e-6))))


def check_arguments(check_every: Optional[int], check_seconds: float) -> None:
  """Raises ValueError for a `check_every` or `check_seconds` no schedule can take."""
  if check_every is not None and (isinstance(check_every, bool)
                                  or not isinstance(check_every, int) or check_every < 1):
    raise ValueError(f"`check_every` must be an integer >= 1, or None to check about every "
                     f"`check_seconds`. Received: check_every={check_every!r}")
  if not check_seconds > 0:
    raise ValueError(f"`check_seconds` must be > 0. Received: check_seconds={check_seconds!r}")


class Schedule:
  """When a running job checks for SIGTERM, and what every worker agrees there.

  Args:
    agree: `any_worker(strategy)` under multi-worker mirrored, else None.
    check_every: check every this many steps; None: about every `check_seconds`.
    check_seconds: seconds of training between two checks.

  Raises:
    ValueError: a bad `check_every` or `check_seconds`.
  """

  def __init__(self, agree: Optional[Agree], *, check_every: Optional[int] = None,
               check_seconds: float = CHECK_SECONDS):
    check_arguments(check_every, check_seconds)
    self.check_every, self.check_seconds = check_every, float(check_seconds)
    self._agree = agree
    self.restart(0)

  def restart(self, step: int) -> None:
    """Checks again from `step` (an epoch's or a fit's first): the first at the next step."""
    self.next = step + (self.check_every or 1)
    self._last = (step, time.monotonic())

  def due(self, step: int) -> bool:
    """Whether a check is due after `step` steps."""
    return step >= self.next

  def agreed(self, received: bool, step: Optional[int]) -> bool:
    """At a check after `step` steps: whether any worker got SIGTERM (`received` here).

    Schedules the next check from the pace since the last; `step` None (an
    epoch's end, where the next epoch restarts the schedule) schedules nothing.
    """
    steps, since = self._last
    done = 0 if step is None else step - steps
    terminated, interval = check(self._agree, received, done, time.monotonic() - since,
                                 self.check_seconds)
    if step is not None:
      self.next, self._last = step + (self.check_every or interval), (step, time.monotonic())
    return terminated
