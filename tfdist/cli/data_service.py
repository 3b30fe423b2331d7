"""`tfdist data_service --role=dispatcher|worker`: one tf.data service server, until stopped.

`tfdist launch --data_workers N` runs a dispatcher and N workers the same way
beside the training tasks; on SLURM or Kubernetes this command runs them on
their own nodes or pods. Prints one line when the server listens, then serves
until SIGTERM (`tfdist.data.service.serve`).
"""

import sys

from absl import flags

_ROLE = flags.DEFINE_enum("role", None, ["dispatcher", "worker"], "Which server to run.",
                          required=True)
_PORT = flags.DEFINE_integer("port", 0, "The port to listen on (0: any free port).",
                             lower_bound=0)
_DISPATCHER = flags.DEFINE_string("dispatcher_address", None, "worker: the dispatcher, "
                                  "host:port.")
_WORKER_ADDRESS = flags.DEFINE_string("worker_address", None, "worker: how trainers reach "
                                      "it (host:port), when not localhost. Default: "
                                      "TFDIST_NODE_ADDRESS:PORT where a launcher sets it "
                                      "(Ray), else localhost:PORT.")
_WORK_DIR = flags.DEFINE_string("work_dir", None, "dispatcher: journal its state here, so "
                                "that a restart resumes every job.")


def main(argv):
  del argv
  from tfdist.data import service  # pylint: disable=g-import-not-at-top  (TensorFlow)
  try:
    service.serve(_ROLE.value, _PORT.value, dispatcher_address=_DISPATCHER.value,
                  worker_address=_WORKER_ADDRESS.value, work_dir=_WORK_DIR.value)
  except ValueError as e:
    print(f"tfdist data_service: {e}", file=sys.stderr)
    return 2
  return 0
