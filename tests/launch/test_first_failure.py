"""The task that failed first, from the records its wrapper left."""

import os

from tfdist.launch import _first_failure as first_failure
from tfdist.task import _trains_alone as trains_alone


def test_the_earliest_failure_is_first_and_a_signal_counts_as_128_plus_it(tmp_path):
  env = {trains_alone.JOINED_DIR_ENV: str(tmp_path)}
  first_failure.record("worker:0", 0, env)  # A task that passed leaves nothing.
  assert os.listdir(tmp_path) == []
  first_failure.record("worker:1", -9, env)  # Killed (say, out of memory) on its own.
  first_failure.record("chief:0", 3, env)
  assert first_failure.first(str(tmp_path)) == ("worker:1", 137)
  assert first_failure.first(str(tmp_path / "gone")) is None


def test_records_that_do_not_read_as_records_are_skipped(tmp_path):
  (tmp_path / "worker-0.exit").write_text("not a code\n")
  (tmp_path / "evaluator-0.exit").write_text("1 1.0\n")
  (tmp_path / "worker-1.joined").write_text("")
  assert first_failure.first(str(tmp_path)) is None
  (tmp_path / "worker-2.exit").write_text("7 2.5\n")
  assert first_failure.first(str(tmp_path)) == ("worker:2", 7)


def test_no_folder_no_record(tmp_path):
  first_failure.record("worker:1", 3, {})
  first_failure.record("worker:1", 3, {trains_alone.JOINED_DIR_ENV: str(tmp_path / "gone")})
  assert not (tmp_path / "gone").exists()


def test_only_a_failures_code_counts(tmp_path):
  (tmp_path / "worker-0.exit").write_text("0 1.0\n")  # Forged or left over: no failure.
  (tmp_path / "worker-1.exit").write_text("300 1.5\n")
  (tmp_path / "worker-2.exit").write_text("3 nan\n")
  assert first_failure.first(str(tmp_path)) is None
