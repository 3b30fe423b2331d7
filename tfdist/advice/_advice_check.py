"""How far an advice was from a longer measurement of every way it ranked.

`tfdist advise --check` (and `tfdist bench --suites=advise`) times each way
again, in fits several times as long, and `check` holds the advice to them:
the pick within `PICK_WITHIN` of the fastest measured, and each way's
examples/s within `PREDICTED_WITHIN` of what was advised.
"""

import dataclasses
from typing import Dict, Optional

from tfdist.advice import decision

# each examples/s within 15% of what was advised.
PICK_WITHIN = 0.05
PREDICTED_WITHIN = 0.15


@dataclasses.dataclass(frozen=True)
class Check:
  """The advice against a longer measurement of every way it considered."""

  pick: Optional[str]
  fastest: Optional[str]  # None: no way that fits was measured.
  pick_share: Optional[float]  # The pick's measured examples/s / the fastest's; None: unmeasured.
  errors: Dict[str, float]  # advised / measured examples/s - 1, by way.
  measured: Dict[str, float]  # examples/s

  @property
  def passed(self) -> bool:
    return (self.pick_share is not None and self.pick_share >= 1 - PICK_WITHIN
            and all(abs(e) <= PREDICTED_WITHIN for e in self.errors.values()))

  def __str__(self) -> str:
    lines = [f"{'way':<44} {'advised':>10} {'measured':>10} {'error':>7}"]
    for name, value in sorted(self.measured.items(), key=lambda kv: -kv[1]):
      advised = value * (1 + self.errors[name])
      lines.append(f"{name:<44} {advised:>10.0f} {value:>10.0f} {self.errors[name]:>+7.0%}")
    if self.pick is None:
      verdict = "no pick: nothing fits the memory given"
    elif self.pick_share is None:
      verdict = (f"pick {self.pick}: not checked (predicted for a cluster this machine "
                 "does not run)")
    else:
      verdict = (f"pick {self.pick}: {self.pick_share:.0%} of the fastest measured "
                 f"({self.fastest})")
    worst = max((abs(e) for e in self.errors.values()), default=0.0)
    if self.passed:
      status = "PASS"
    elif self.pick_share is None and worst <= PREDICTED_WITHIN:
      status = "NOT CHECKED"  # Nothing here was wrong; the pick could not be run.
    else:
      status = "FAIL"
    return "\n".join(lines + [
        f"{verdict}; worst prediction error {worst:.0%} (targets: pick within "
        f"{PICK_WITHIN:.0%}, predictions within {PREDICTED_WITHIN:.0%}): {status}"])


def check(advice: decision.Advice, measured: Dict[str, float]) -> Check:
  """Holds `advice` to `measured` examples/s of every way it ranked (see `Check`).

  Ways missing from `measured` (a cluster this machine cannot run) are left out;
  a pick among them is reported as not checked, never as passed.
  """
  fits = {o.name for o in advice.options if o.fits}
  fastest = max((name for name in measured if name in fits), key=measured.get, default=None)
  errors = {o.name: o.examples_per_second / measured[o.name] - 1 for o in advice.options
            if o.name in measured}
  pick = None if advice.pick is None else advice.pick.name
  return Check(
      pick=pick, fastest=fastest,
      pick_share=(measured[pick] / measured[fastest] if pick in measured and fastest else None),
      errors=errors, measured=dict(measured))
