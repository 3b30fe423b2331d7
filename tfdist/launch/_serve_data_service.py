"""One tf.data service server beside a local or Ray cluster, until stopped.

`python -m tfdist.launch._serve_data_service --role=dispatcher|worker --port=N
[--dispatcher_address=HOST:PORT] [--work_dir=DIR]`: what
`tfdist.launch._data_servers` starts (`tfdist.data.service.serve` does the
work; `tfdist data_service` is the same for users' own nodes and pods).
"""

import os
import sys

# The flags this process takes, all as --NAME=VALUE.
_NAMES = ("role", "port", "dispatcher_address", "worker_address", "work_dir")


def main(argv) -> int:
  given = dict(arg[2:].split("=", 1) for arg in argv[1:] if arg.startswith("--") and "=" in arg)
  unknown = sorted(set(given) - set(_NAMES))
  if unknown or len(given) != len(argv) - 1:
    sys.stderr.write(f"tfdist data service: takes --NAME=VALUE for NAME in {list(_NAMES)}. "
                     f"Received: {argv[1:]}\n")
    return 2
  from tfdist.data import service  # pylint: disable=import-outside-toplevel  TensorFlow.
  try:
    service.serve(given.get("role"), int(given.get("port", 0)),
                  dispatcher_address=given.get("dispatcher_address"),
                  worker_address=given.get("worker_address"), work_dir=given.get("work_dir"))
  except ValueError as e:
    sys.stderr.write(f"tfdist data service: {e}\n")
    return 2
  return 0


if __name__ == "__main__":
  # As `tfdist data_service` runs (tfdist.cli.main): no TensorFlow C++ INFO and WARNING lines
  # unless the environment asks for them.
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  sys.exit(main(sys.argv))
