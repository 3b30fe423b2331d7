"""One tf.data service server beside a local or Ray cluster, until stopped.

`python -m tfdist.launch._serve_data_service --role=dispatcher|worker --port=N
[--dispatcher_address=HOST:PORT] [--work_dir=DIR]`: what
`tfdist.launch._data_servers` starts (`tfdist.data.service.serve` does the
work; `tfdist data_service` is the same for users' own nodes and pods).
"""

import argparse
import os
import sys


def main(argv) -> int:
  parser = argparse.ArgumentParser(prog="tfdist data service")
  parser.add_argument("--role", required=True, choices=["dispatcher", "worker"])
  parser.add_argument("--port", type=int, default=0)
  for name in ("--dispatcher_address", "--worker_address", "--work_dir"):
    parser.add_argument(name)
  args = parser.parse_args(argv[1:])  # A bad argument: its usage and exit 2.
  from tfdist.data import service  # pylint: disable=import-outside-toplevel  TensorFlow.
  try:
    service.serve(args.role, args.port, dispatcher_address=args.dispatcher_address,
                  worker_address=args.worker_address, work_dir=args.work_dir)
  except ValueError as e:
    sys.stderr.write(f"tfdist data service: {e}\n")
    return 2
  return 0


if __name__ == "__main__":
  # As `tfdist data_service` runs (tfdist.cli.main): no TensorFlow C++ INFO and WARNING lines
  # unless the environment asks for them.
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  sys.exit(main(sys.argv))
