"""A run's CPU per test against a reference run's: the machine's speed now, and what changed.

The same test can use nearly twice the CPU in one hour of this shared machine
that it uses in another (docs/suite-time-speed.md), so a phase's time alone cannot
tell a slow hour from a change that made tests heavier. The median ratio of the
tests' CPU to a reference run's is the hour's, where most tests did not change; a
test far above that ratio is one a change made heavier.

`tests/suite_cpu_reference.json` holds the reference: a whole `make test` from a
fresh clone, its date, machine, command and commit, the virtualenv and TensorFlow
it ran, and each test's CPU there (of the tests that used a second or more).
`tests/conftest.py` prints `summary()` after its CPU report, for the tests that passed
and are not marked `alone`.
"""

import dataclasses
import json
import os
import statistics
from typing import Dict, List, Mapping, Optional, Tuple

REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "suite_cpu_reference.json")
# Tests of less CPU than this in the reference run swing by more than the hour does.
FLOOR_SECONDS = 2.0
# Fewer tests in common than this give no ratio worth printing.
MIN_TESTS = 5
# A test is heavier when it used this many seconds more than the ratio predicts, and this many
# times as much: in two runs of the same code (ci41, ci42) no test of 2 s or more was over
# 1.43 times what the median ratio predicts.
MIN_EXCESS_SECONDS = 4.0
MIN_EXCESS_RATIO = 1.5


@dataclasses.dataclass
class Comparison:
  """A run against the reference.

  Attributes:
    ratio: the median of (CPU now / CPU in the reference), over `tests`.
    tests: how many tests both runs ran that used FLOOR_SECONDS or more in the reference.
    heavier: (test, CPU now, CPU that `ratio` predicts), largest excess (now minus
      predicted) first.
  """

  ratio: float
  tests: int
  heavier: List[Tuple[str, float, float]]


def compare(now: Mapping[str, float], reference: Mapping[str, float], *,
            floor: float = FLOOR_SECONDS, count: int = 5) -> Optional[Comparison]:
  """Compares a run's CPU per test (`now`, the tests that passed) with the reference's.

  Returns None when fewer than MIN_TESTS tests of at least `floor` (> 0) seconds in
  the reference ran now. `heavier` holds at most `count` tests that used at least
  MIN_EXCESS_SECONDS more and MIN_EXCESS_RATIO times what the ratio predicts.
  """
  if floor <= 0:
    raise ValueError(f"floor must be over 0 seconds. Received: floor={floor}")
  common = [name for name, seconds in reference.items() if seconds >= floor and name in now]
  if len(common) < MIN_TESTS:
    return None
  ratio = statistics.median(now[name] / reference[name] for name in common)
  heavier = []
  for name in common:
    predicted = ratio * reference[name]
    if (now[name] - predicted >= MIN_EXCESS_SECONDS
        and now[name] >= MIN_EXCESS_RATIO * predicted):
      heavier.append((name, now[name], predicted))
  heavier.sort(key=lambda row: row[2] - row[1])
  return Comparison(ratio=ratio, tests=len(common), heavier=heavier[:count])


def report(comparison: Comparison, date: str, commit: str) -> List[str]:
  """The lines that say it, for pytest's terminal summary: the reference ran at `date`, `commit`."""
  lines = [f"against the reference run ({date}, {commit}, "
           f"tests/suite_cpu_reference.json): the {comparison.tests} tests that used "
           f"{FLOOR_SECONDS:g} s of CPU or more there used a median {comparison.ratio:.2f} times "
           "as much here:",
           "how much slower the machine runs now (under 1: faster), where most tests are unchanged."]
  rule = (f"{MIN_EXCESS_SECONDS:g} s and {MIN_EXCESS_RATIO:g} times what that ratio predicts "
          "(a change's cost, not the hour's)")
  if comparison.heavier:
    lines.append(f"heavier by at least {rule}:")
    lines += [f"{seconds:8.1f}s cpu, {predicted:.1f}s predicted  {name}"
              for name, seconds, predicted in comparison.heavier]
  else:
    lines.append(f"no test was heavier by at least {rule}.")
  return lines


def summary(now: Mapping[str, float], *, tensorflow: str, virtualenv: str,
            path: str = REFERENCE) -> List[str]:
  """What pytest prints of this run (`now`: the passed tests' CPU) against the reference.

  Nothing where there is no reference file; one line that says why where the run is
  not comparable (another virtualenv or TensorFlow, too few tests in common) or the
  file cannot be read.
  """
  try:
    with open(path, encoding="utf-8") as f:
      reference = json.load(f)
    ran = (reference["virtualenv"], reference["tensorflow"])
    seconds = {str(name): float(value) for name, value in reference["cpu_seconds"].items()}
    date, commit = reference["date"], reference["commit"]
  except FileNotFoundError:
    return []
  except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
    return [f"(the reference run's file {path} could not be read, so this run is not "
            f"compared with it: {e!r})"]
  if ran != (virtualenv, tensorflow):
    return [f"(the reference run ran {ran[0]} on TensorFlow {ran[1]}, this one {virtualenv} "
            f"on {tensorflow}: not compared)"]
  comparison = compare(now, seconds)
  if comparison is None:
    return [f"(fewer than {MIN_TESTS} tests that passed here, not marked `alone`, used "
            f"{FLOOR_SECONDS:g} s of CPU or more in the reference run: not compared)"]
  return report(comparison, date, commit)


def reference_from_lines(lines_path: str, virtualenv: str) -> Tuple[Optional[str], Dict[str, float]]:
  """(TensorFlow, each test's CPU) from a `pytest --cpu-lines` file, of `virtualenv`'s runs.

  Keeps the tests that passed and used a second of CPU or more, and not those marked
  `alone`: they measure speeds side by side, and the same code's CPU there differed by up to
  2.2 times what the hour predicts (ci41 and ci42, docs/suite-time-speed.md).
  """
  tensorflow, seconds = None, {}
  with open(lines_path, encoding="utf-8") as f:
    for line in f:
      row = json.loads(line)
      if row.get("virtualenv") != virtualenv or not row.get("passed") or row.get("alone"):
        continue
      tensorflow = row["tensorflow"]
      if row["cpu_seconds"] >= 1.0:
        seconds[row["test"]] = row["cpu_seconds"]
  return tensorflow, dict(sorted(seconds.items()))
