"""tfdist._folders: the folders a job makes are its user's only, and a launch's go with it."""

import os
import stat
import signal
import sys
import textwrap
import threading
import time

import pytest

import helpers
from tfdist import _folders as folders


def _mode(path) -> int:
  return stat.S_IMODE(os.stat(path).st_mode)


def test_each_folder_it_makes_is_private_and_existing_ones_keep_their_mode(tmp_path):
  os.chmod(tmp_path, 0o755)
  folders.makedirs(str(tmp_path / "run" / "backup" / "chief"))
  for made in ("run", "run/backup", "run/backup/chief"):
    assert _mode(tmp_path / made) == 0o700, made
  assert _mode(tmp_path) == 0o755  # The user's choice, not tfdist's.
  folders.makedirs(str(tmp_path / "run"))  # Exists-ok.


def test_workers_making_the_same_folders_at_once_all_succeed(tmp_path):
  errors = []
  def make():
    try:
      folders.makedirs(str(tmp_path / "a" / "b" / "c"))
    except OSError as e:  # pragma: no cover - what the test is for.
      errors.append(e)
  threads = [threading.Thread(target=make) for _ in range(8)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors and _mode(tmp_path / "a" / "b" / "c") == 0o700


def test_a_file_in_the_way_is_an_error(tmp_path):
  (tmp_path / "taken").write_text("")
  with pytest.raises(OSError):
    folders.makedirs(str(tmp_path / "taken" / "backup"))


def _gone(path, seconds=30) -> bool:
  deadline = time.monotonic() + seconds
  while os.path.exists(path) and time.monotonic() < deadline:
    time.sleep(0.05)
  return not os.path.exists(path)


def test_closing_the_remover_removes_the_folders_at_once(tmp_path):
  made = [tmp_path / "a", tmp_path / "b"]
  for folder in made:
    folder.mkdir()
    (folder / "record").write_text("")
  remover = folders.remove_when_gone([str(f) for f in made])
  time.sleep(0.5)
  assert all(f.is_dir() for f in made)  # Kept while this process holds it.
  remover.close()
  assert all(_gone(f) for f in made)


def test_a_temporary_folder_is_private_and_gone_when_its_block_ends_or_fails(tmp_path):
  with folders.temporary("tfdist-joined-", str(tmp_path)) as made:
    assert os.path.dirname(made) == str(tmp_path)
    assert os.path.basename(made).startswith("tfdist-joined-") and _mode(made) == 0o700
    (tmp_path / made / "worker-0.tensorflow").write_text("")
  assert _gone(made)
  with pytest.raises(KeyboardInterrupt):
    with folders.temporary("tfdist-progress-", str(tmp_path)) as made:
      os.mkdir(os.path.join(made, "worker-1"))  # A tree, not only files.
      raise KeyboardInterrupt  # The user's Ctrl-C while the job runs.
  assert _gone(made) and not os.listdir(tmp_path)


@pytest.mark.slow
def test_an_actors_folders_go_when_it_is_sigkilled(tmp_path):
  # Ray kills a lost launcher's actors, and their children: no finally runs in them.
  folder = tmp_path / "tfdist-joined-x"
  folder.mkdir()
  (folder / "worker-0.tensorflow").write_text("")
  code = textwrap.dedent("""
      import os, signal, sys, time
      from tfdist import _folders as folders
      remover = folders.remove_when_gone(sys.argv[1:])
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
