"""`tfdist launch --workers 2 -- python train.py --epochs 3`

Starts a local cluster on free loopback ports: one process per task, each with
its TF_CONFIG, output prefixed with the task. Exits with the cluster's code.
"""

import sys

from absl import flags

from tfdist import cluster as cluster_lib
from tfdist import launch as launch_lib

_WORKERS = flags.DEFINE_integer("workers", 2, "Number of worker tasks.", lower_bound=1)
_PS = flags.DEFINE_integer("ps", 0, "Number of parameter-server tasks.", lower_bound=0)
_CHIEF = flags.DEFINE_bool("chief", False, "Add a chief task.")
_EVALUATOR = flags.DEFINE_bool("evaluator", False, "Add a sidecar evaluator task.")
_TIMEOUT = flags.DEFINE_float("timeout", None, "Stop the whole cluster after this many "
                              "seconds (exit code 124).", lower_bound=0)


def main(argv):
  command = argv[1:]
  if not command:
    print("tfdist launch: give the command after '--', e.g. "
          "`tfdist launch --workers 2 -- python train.py`. Received: no command",
          file=sys.stderr)
    return 2
  spec = cluster_lib.ClusterSpec.local(_WORKERS.value, ps=_PS.value, chief=_CHIEF.value,
                                       evaluator=_EVALUATOR.value)
  print(f"[tfdist launch] {spec}", flush=True)
  try:
    return launch_lib.launch_local(command, spec, timeout=_TIMEOUT.value)
  except launch_lib.LaunchError as e:
    print(f"tfdist launch: {e}", file=sys.stderr)
    return 127
