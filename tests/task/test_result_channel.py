"""tfdist.task._result_channel: a process's result comes back through a file only this launch made.

The pickled results of function launches are tested end to end in
tests/launch/test_notebook.py (a forged output line loads nothing) and
tests/launch/test_ray.py; here, the JSON that measuring processes hand back.
"""

import os
import stat
import subprocess
import sys

from tfdist.task import _result_channel as result_channel


def _write_json(code):
  return lambda path: subprocess.run(
      [sys.executable, "-c", f"import json, sys; json.dump({{'seen': sys.argv[1]}}, "
       f"open(sys.argv[1], 'w')); sys.exit({code})", path], timeout=60).returncode


def test_what_the_process_wrote_comes_back_from_a_private_folder_then_removed():
  folders = []

  def start(path):
    folders.append(os.path.dirname(path))
    assert stat.S_IMODE(os.stat(folders[0]).st_mode) == 0o700
    return _write_json(0)(path)

  code, result = result_channel.run_for_json(start)
  assert code == 0 and result == {"seen": os.path.join(folders[0], "result.json")}
  assert not os.path.exists(folders[0])


def test_a_failed_process_or_one_that_wrote_nothing_gives_none():
  assert result_channel.run_for_json(_write_json(3)) == (3, None)  # Written, then failed.
  assert result_channel.run_for_json(lambda path: 0) == (0, None)
  assert result_channel.run_for_json(lambda path: "timeout") == ("timeout", None)
