"""One task of `tfdist launch --ray`, from this machine: `python -m tfdist.launch.ray._task -- CMD`.

`tfdist launch --ray` runs this in place of each task's command, with the
task's TF_CONFIG and the placement group the launcher reserved. It starts a
Ray actor in the task's bundle, which runs CMD on its node; it prints the
task's lines as they come, passes SIGTERM and SIGINT on, and exits as the task
did (killed by a signal: killed by the same one). When this process dies, even
by SIGKILL, Ray kills its actor and the actor's process kills the task.
"""

import os
import signal
import sys

from tfdist.launch.ray import _launcher as ray_launch


def main(argv) -> int:
  command = argv[argv.index("--") + 1:] if "--" in argv else argv[1:]
  cwd = os.getcwd()
  code = ray_launch.run_task(os.environ[ray_launch.ADDRESS_ENV], command, os.environ,
                             sys.stdout, cwd)
  if code < 0:  # Die of the same signal, so the launcher reports what killed the task.
    sys.stdout.flush()
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
  return code


if __name__ == "__main__":
  sys.exit(main(sys.argv))
