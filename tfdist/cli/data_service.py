"""`tfdist data_service --role=dispatcher|worker`: one tf.data service server, until stopped.

`tfdist launch --data_workers N` runs a dispatcher and N workers this way
beside the training tasks; on SLURM or Kubernetes the same command runs
them on their own nodes or pods. Prints one line when the server listens,
then serves until SIGTERM.
"""

import os
import sys

from absl import flags

from tfdist.cluster import _data_service as data_service_lib

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
  if _ROLE.value == "dispatcher":
    server = service.dispatch_server(_PORT.value, _WORK_DIR.value)
    print(f"tf.data service dispatcher listening at {server.target}", flush=True)
  else:
    if not _DISPATCHER.value:
      print("tfdist data_service: a worker needs --dispatcher_address=host:port. "
            "Received: --dispatcher_address unset", file=sys.stderr)
      return 2
    address = _WORKER_ADDRESS.value
    node = os.environ.get(data_service_lib.NODE_ADDRESS_ENV)
    if address is None and node:  # TF fills in the port it listens on.
      address = f"{node}:%port%"
    server = service.worker_server(_DISPATCHER.value, _PORT.value, address)
    print(f"tf.data service worker on port {_PORT.value or '(any)'}, registered with "
          f"{_DISPATCHER.value}", flush=True)
  server.join()
  return 0
