"""tfdist.launch._removal: folders go with the process that made them, however it ended."""

import os
import signal
import sys
import textwrap
import time

import pytest

import helpers


def _gone(path, seconds=30) -> bool:
  deadline = time.monotonic() + seconds
  while os.path.exists(path) and time.monotonic() < deadline:
    time.sleep(0.05)
  return not os.path.exists(path)


def test_closing_the_remover_removes_the_folders_at_once(tmp_path):
  from tfdist.launch import _removal as removal
  folders = [tmp_path / "a", tmp_path / "b"]
  for folder in folders:
    folder.mkdir()
    (folder / "record").write_text("")
  remover = removal.remove_when_gone([str(f) for f in folders])
  time.sleep(0.5)
  assert all(f.is_dir() for f in folders)  # Kept while this process holds it.
  remover.close()
  assert all(_gone(f) for f in folders)


@pytest.mark.slow
def test_an_actors_folders_go_when_it_is_sigkilled(tmp_path):
  # Ray kills a lost launcher's actors, and their children: no finally runs in them.
  folder = tmp_path / "tfdist-joined-x"
  folder.mkdir()
  (folder / "worker-0.tensorflow").write_text("")
  code = textwrap.dedent("""
      import os, signal, sys, time
      from tfdist.launch import _removal as removal
      remover = removal.remove_when_gone(sys.argv[1:])
      time.sleep(1)
      print(os.path.isdir(sys.argv[1]), flush=True)
      # As Ray kills an actor: its children first (kill_child_processes_on_worker_exit).
      for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
          with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[1] == str(os.getpid()):
              os.kill(int(pid), signal.SIGKILL)
        except OSError:
          pass
      os.kill(os.getpid(), signal.SIGKILL)
      """)
  with helpers.spawned([sys.executable, "-c", code, str(folder)]) as process:
    assert process.stdout.readline().strip() == "True"  # Kept while the process lives.
    assert process.wait(timeout=60) == -signal.SIGKILL
  assert _gone(folder)


def test_a_sigkilled_task_wrapper_leaves_no_progress_folder(tmp_path):
  # A Ray node or a SLURM node keeps its temporary folder after the wrapper is killed.
  temporary = tmp_path / "tmp"
  temporary.mkdir()
  code = textwrap.dedent("""
      import os, sys
      from tfdist.launch import _supervision as supervision, watchdog
      task = "import time; print('started', flush=True); time.sleep(300)"
      watchdog.watch_task([sys.executable, "-c", task], dict(os.environ), "worker:0",
                          timeout=300, output=sys.stdout, grace_period=1,
                          preexec_fn=supervision.die_with_parent(os.getpid()))
      """)
  with helpers.spawned([sys.executable, "-c", code], env={"TMPDIR": str(temporary)}) as wrapper:
    # The task starts after its folder and the folder's remover: killed now, nothing ran after.
    assert wrapper.stdout.readline().strip() == "started"
    made = os.listdir(temporary)
    assert len(made) == 1 and made[0].startswith("tfdist-progress-"), made
    os.kill(wrapper.pid, signal.SIGKILL)
    assert wrapper.wait(timeout=60) == -signal.SIGKILL
  assert _gone(temporary / made[0])
