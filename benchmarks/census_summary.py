"""Summarizes a census of Python processes (benchmarks/census/sitecustomize.py).

    python benchmarks/census_summary.py CENSUS_LOG [--top=30]

Prints, for the processes of the test virtualenv (.venv): how many imported TensorFlow
and their CPU; how many imported Keras 3 and tf_keras; then the scripts that used the
most CPU, with their process counts.
"""

import collections
import json

from absl import app
from absl import flags

_TOP = flags.DEFINE_integer("top", 30, "Scripts to list.", lower_bound=1)


def main(argv):
  rows = [json.loads(line) for line in open(argv[1])]
  rows = [r for r in rows if r["exe"].split("/")[-3:-2] == [".venv"]]
  tf = [r for r in rows if r["tf"]]
  print(f"{len(rows)} processes, {sum(r['cpu'] for r in rows):.0f} s of CPU; "
        f"{len(tf)} imported TensorFlow ({sum(r['cpu'] for r in tf):.0f} s)")
  kinds = collections.Counter(("Keras 3" if r["k3"] else "") + (" tf_keras" if r["tfk"] else "")
                              for r in tf)
  for kind, count in kinds.most_common():
    print(f"  {count:>4} with {kind.strip() or 'neither Keras'}")
  cpu, count = collections.Counter(), collections.Counter()
  for r in rows:
    script = " ".join(a.rsplit("/", 1)[-1] for a in r["argv"][:2])[:60]
    cpu[script] += r["cpu"]
    count[script] += 1
  print(f"{'CPU s':>8} {'procs':>6}  script")
  for script, seconds in cpu.most_common(_TOP.value):
    print(f"{seconds:>8.1f} {count[script]:>6}  {script}")


if __name__ == "__main__":
  app.run(main)
