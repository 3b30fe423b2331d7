"""tfdist._folders: the folders a job makes are its user's only."""

import os
import stat
import threading

import pytest

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
