"""Writes tests/suite_cpu_reference.json from a whole run's `pytest --cpu-lines` file.

    clone=$(mktemp -d) && git clone . "$clone" && cd "$clone"
    CI=true PYTEST_ADDOPTS="--cpu-lines=$clone/cpu.jsonl" bash .ci/run
    .venv/bin/python benchmarks/suite_cpu_reference.py "$clone/cpu.jsonl" \\
        --date="2026-11-30 21:27 UTC" --commit=7e97537 \\
        --machine="the 2-vCPU Intel Xeon VM with AVX-512" > tests/suite_cpu_reference.json

(A folder of `mktemp -d` is the user's alone: no other user can put a file of lines there
first, or a link where pytest appends them.)

Keeps the lines of one virtualenv (`--virtualenv`, the test virtualenv `.venv` by default:
`make test`'s first and second phases, not the version checks' stacks), and of those the
tests that passed and used a second of CPU or more. `tests/suite_cpu.py` says what the
suite does with it.
"""

import json
import os
import sys

from absl import app
from absl import flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests"))
import suite_cpu  # pylint: disable=wrong-import-position

_DATE = flags.DEFINE_string("date", None, "When the run began, e.g. '2026-11-30 21:27 UTC'.",
                            required=True)
_COMMIT = flags.DEFINE_string("commit", None, "The commit it ran.", required=True)
_MACHINE = flags.DEFINE_string("machine", None, "The machine it ran on.", required=True)
_VIRTUALENV = flags.DEFINE_string("virtualenv", ".venv", "The virtualenv whose tests to keep, "
                                  "by its folder's name.")


def main(argv):
  if len(argv) != 2:
    raise app.UsageError(f"One --cpu-lines file, please. Received: {argv[1:]}")
  tensorflow, seconds = suite_cpu.reference_from_lines(argv[1], _VIRTUALENV.value)
  if not seconds:
    raise app.UsageError(f"No test that passed in {_VIRTUALENV.value} used a second of CPU in "
                         f"{argv[1]}: a file of `pytest --cpu-lines` from a whole run, please.")
  json.dump({"date": _DATE.value, "commit": _COMMIT.value, "machine": _MACHINE.value,
             "command": "CI=true PYTEST_ADDOPTS=--cpu-lines=PATH bash .ci/run, from a fresh clone",
             "virtualenv": _VIRTUALENV.value, "tensorflow": tensorflow, "cpu_seconds": seconds},
            sys.stdout, indent=0)
  sys.stdout.write("\n")


if __name__ == "__main__":
  app.run(main)
