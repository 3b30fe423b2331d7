"""Which task failed first, where the engine reports only the worst exit code.

`srun --kill-on-bad-exit=1` ends a step when one task fails: it sends SIGTERM
to the others and returns the highest exit code of all tasks, a signal
counting as 128 + signal (SLURM's srun manual, "RETURN VALUE"). A task that
exits 3 while its peer is still training thus ends the job with 143, the code
of the peer SLURM stopped, and the cause is lost.

So `tfdist task`, where it runs the command as a child, leaves a record of
the command's own end in the launcher's records folder
(`tfdist.task._trains_alone.JOINED_DIR_ENV`): `<type>-<index>.exit`, holding
the exit code and the time. A command that ended because this wrapper passed
it SIGTERM or SIGINT leaves none. At the end the launcher reads the earliest
record (`first`) and returns its code, with one line saying so.

Example (a launcher, at the end of its job):

    found = first(directory)
    if found and found[1] != code:
      report(f"{found[0]} failed first, with exit code {found[1]} ...")
"""

import logging
import math
import os
import re
import time
from typing import Mapping, Optional, Tuple

from tfdist.task import _trains_alone as trains_alone

logger = logging.getLogger("tfdist")

_NAME = re.compile(r"(chief|worker|ps)-(\d+)\.exit")


def record(task: str, code: int, environ: Optional[Mapping[str, str]] = None) -> None:
  """Leaves `task`'s exit `code` (a signal as 128 + signal) for the launcher, if it made a folder.

  Args:
    task: "worker:1" and the like.
    code: what the command returned; negative for a signal, as `subprocess` gives it.
    environ: where the launcher named its folder (default: os.environ).
  """
  environ = os.environ if environ is None else environ
  directory = environ.get(trains_alone.JOINED_DIR_ENV)
  name = f"{task.replace(':', '-')}.exit"
  if code == 0 or not directory or not os.path.isdir(directory) or not _NAME.fullmatch(name):
    return
  try:
    with open(os.path.join(directory, name), "w") as f:
      f.write(f"{128 - code if code < 0 else code} {time.time():.6f}\n")
  except OSError as error:  # The task's own exit code stands; the launcher keeps srun's.
    logger.warning("tfdist: could not leave %s's exit code in %s: %s", task, directory, error)


def first(directory: str) -> Optional[Tuple[str, int]]:
  """The task that failed first and its exit code, from the records in `directory`; None if none.

  A record that does not read as one (`record`'s two numbers) is skipped.
  """
  found = []
  for name in os.listdir(directory) if os.path.isdir(directory) else []:
    match = _NAME.fullmatch(name)
    if not match:
      continue
    try:
      with open(os.path.join(directory, name)) as f:
        code, when = f.read(64).split()
      if not 1 <= int(code) <= 255 or not math.isfinite(float(when)):  # A failure's code.
        continue
      found.append((float(when), f"{match.group(1)}:{match.group(2)}", int(code)))
    except (OSError, ValueError):
      continue
  if not found:
    return None
  _, task, code = min(found)
  return task, code
