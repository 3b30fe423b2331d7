"""One task of `notebook_launch`: `python -m tfdist.cli.notebook_task NAME SOURCE`.

Runs the function NAME defined in SOURCE (a notebook cell's function, from
its source: tasks are fresh processes). On the task that ends the job (the
chief, else worker 0) it prints what the function returned, pickled, on one
line that `notebook_launch` takes out of the cell's output and returns.
"""

import base64
import json
import os
import pickle
import sys

from tfdist.launch import notebook


def main(argv) -> int:
  name, source = argv[1:3]
  namespace = {"__name__": "__main__"}
  exec(compile(source, f"<{name}>", "exec"), namespace)  # pylint: disable=exec-used
  result = namespace[name]()
  config = json.loads(os.environ.get("TF_CONFIG", "{}"))
  task, jobs = config.get("task", {}), config.get("cluster", {})
  if (task.get("type"), task.get("index")) == (("chief", 0) if "chief" in jobs else ("worker", 0)):
    print(f"{notebook.RESULT_MARKER} {base64.b64encode(pickle.dumps(result)).decode()}",
          flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
