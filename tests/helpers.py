"""Running subprocesses in tests: always with a timeout, never leaving children behind."""

import os
import signal
import subprocess
import sys
from typing import Mapping, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(REPO, "tests", "scripts")


def run(command: Sequence[str], *, timeout: float,
        env: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess:
  """Runs `command` in its own process group; kills the whole group on timeout."""
  full_env = dict(os.environ)
  full_env.pop("TF_CONFIG", None)
  full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  full_env.update(env or {})
  process = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=full_env, cwd=REPO,
                             start_new_session=True, text=True, errors="replace")
  try:
    output, _ = process.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, signal.SIGKILL)
    output, _ = process.communicate()
    raise AssertionError(f"timed out after {timeout}s: {command}\n{output[-3000:]}")
  finally:
    try:
      os.killpg(process.pid, signal.SIGKILL)  # Grandchildren too.
    except ProcessLookupError:
      pass
  return subprocess.CompletedProcess(command, process.returncode, output, None)


def python(*args: str) -> list:
  return [sys.executable, *args]


def tfdist_cli(*args: str) -> list:
  return [sys.executable, "-m", "tfdist", *args]
