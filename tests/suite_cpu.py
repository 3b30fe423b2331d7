"""A run's CPU per test against a reference run's: the machine's speed now, and what changed.

The same test can use 1.7 times the CPU in one hour of this shared machine that it
uses in another (docs/suite-time-cpu.md). A phase's time alone cannot tell a slow
hour from a change that made tests heavier. The median ratio of the tests' CPU to
a reference run's is the hour's speed, when most tests did not change; a test far
above that ratio is what a change made heavier.

`tests/suite_cpu_reference.json` holds the reference: a whole `make test` from a
fresh clone, its date, machine, command and commit, and each test's CPU there (of
the tests that used at least a second of it). `tests/conftest.py` prints the
comparison after its CPU report where the installed TensorFlow is the reference's;
the version checks' stacks run other TensorFlows, whose CPU is not comparable.
"""

import dataclasses
import json
import os
import statistics
from typing import Dict, List, Mapping, Optional, Tuple

REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "suite_cpu_reference.json")
# Tests of less CPU than this in the reference run swing by more than the hour does.
FLOOR_SECONDS = 2.0
# Fewer tests in common than this give no speed worth printing.
MIN_TESTS = 5


@dataclasses.dataclass
class Comparison:
  """A run against the reference.

  Attributes:
    speed: the median of (CPU now / CPU in the reference), over `tests`.
    tests: how many tests both runs ran that used FLOOR_SECONDS or more in the reference.
    heavier: (test, CPU now, CPU expected at `speed`), the tests furthest above
      `speed` by seconds, heaviest first.
  """

  speed: float
  tests: int
  heavier: List[Tuple[str, float, float]]


def compare(now: Mapping[str, float], reference: Mapping[str, float], *,
            floor: float = FLOOR_SECONDS, count: int = 5,
            min_excess: float = 3.0) -> Optional[Comparison]:
  """Compares a run's CPU per test (`now`) with the reference's.

  Returns None when fewer than MIN_TESTS tests of at least `floor` seconds in the
  reference ran now. `heavier` holds at most `count` tests that used at least
  `min_excess` seconds and a third more than `speed` predicts.
  """
  common = [name for name, seconds in reference.items() if seconds >= floor and name in now]
  if len(common) < MIN_TESTS:
    return None
  speed = statistics.median(now[name] / reference[name] for name in common)
  excess = []
  for name in common:
    expected = speed * reference[name]
    if now[name] - expected >= min_excess and now[name] >= 4 / 3 * expected:
      excess.append((name, now[name], expected))
  excess.sort(key=lambda row: row[2] - row[1])
  return Comparison(speed=speed, tests=len(common), heavier=excess[:count])


def load(path: str = REFERENCE) -> Optional[dict]:
  """The reference file's contents, or None where there is none."""
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except FileNotFoundError:
    return None


def report(comparison: Comparison, reference: Mapping[str, object]) -> List[str]:
  """The lines that say it, for pytest's terminal summary."""
  lines = [f"against the reference run ({reference['date']}, {reference['commit']}, "
           f"tests/suite_cpu_reference.json): the {comparison.tests} tests that used "
           f"{FLOOR_SECONDS:g} s of CPU or more there used a median {comparison.speed:.2f} times as much here:",
           "the machine's speed now, where most tests are unchanged (over 1: slower)."]
  if comparison.heavier:
    lines.append("heavier than that speed predicts (a change's cost shows here, not the hour's):")
    lines += [f"{seconds:8.1f}s cpu  against {expected:.1f}  {name}"
              for name, seconds, expected in comparison.heavier]
  else:
    lines.append("no test used a third more than that speed predicts.")
  return lines


def reference_from_lines(lines_path: str, tensorflow: str) -> Dict[str, float]:
  """Each test's CPU from a `pytest --cpu-lines` file, of the runs on `tensorflow` only."""
  seconds = {}
  with open(lines_path, encoding="utf-8") as f:
    for line in f:
      row = json.loads(line)
      if row.get("tensorflow") == tensorflow and row["cpu_seconds"] >= 1.0:
        seconds[row["test"]] = row["cpu_seconds"]
  return dict(sorted(seconds.items()))
