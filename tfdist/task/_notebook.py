"""One task of `notebook_launch`: `python -m tfdist.task._notebook`.

Runs the function `TFDIST_FUNCTION` defined in `TFDIST_FUNCTION_SOURCE` (a
notebook cell's function, from its source: tasks are fresh processes; the
source comes in the environment, which only its user can read, not in argv,
which `ps` shows to everyone). The task named in `TFDIST_RESULT_TASK` (the
chief, else worker 0) writes what the function returned, pickled, to the new
file `TFDIST_RESULT_FILE`, in a folder the launch made for it; nothing it
prints is taken as a result.
"""

import json
import os
import pickle
import sys

from tfdist.task import _result_channel as result_channel


def main(argv) -> int:
  del argv  # Everything comes in the environment.
  # Taken out, so that the function's own subprocesses do not inherit them.
  name = os.environ.pop(result_channel.FUNCTION_ENV)
  source = os.environ.pop(result_channel.SOURCE_ENV)
  result_task = os.environ.pop(result_channel.RESULT_TASK_ENV, None)
  result_file = os.environ.pop(result_channel.RESULT_FILE_ENV, None)
  namespace = {"__name__": "__main__"}
  exec(compile(source, f"<{name}>", "exec"), namespace)  # pylint: disable=exec-used
  result = namespace[name]()
  task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
  if result_file and f"{task.get('type')}:{task.get('index')}" == result_task:
    result_channel.write(result_file, pickle.dumps(result))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
