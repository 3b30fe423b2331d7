"""tests/conftest.py: after each test its garbage is collected and what outlives it frozen, and
the processes the suite starts keep their temporary files in a folder of its own."""

import gc
import json
import os
import subprocess
import sys
import weakref

import pytest

import conftest
import helpers


class _Node:
  pass


def test_a_tests_cycles_are_collected_and_what_outlives_the_test_is_frozen():
  garbage = _Node()
  garbage.self = garbage
  collected = weakref.ref(garbage)
  del garbage
  kept = _Node()
  kept.self = kept
  frozen_before = gc.get_freeze_count()
  conftest.collect_and_freeze()
  assert collected() is None
  # Frozen: later collections, which walk gc.get_objects(), skip it.
  assert not any(o is kept for o in gc.get_objects())
  assert gc.get_freeze_count() > frozen_before


def test_the_processes_a_test_starts_write_their_temporary_files_into_the_suites_folder(tmp_path):
  folder = os.environ[conftest.SUITE_TMPDIR]
  result = helpers.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                       timeout=60)
  assert result.returncode == 0, result.stdout
  assert result.stdout.strip() == folder
  assert os.path.basename(folder).startswith("tfd-") and os.path.isdir(folder)
  # pytest's own folders stay outside it: they outlive the run.
  assert not str(tmp_path).startswith(folder + os.sep)


def test_the_suites_folder_is_removed_and_says_what_it_could_not_remove(tmp_path):
  folder = tmp_path / "tfd-x"
  (folder / "ray").mkdir(parents=True)
  (folder / "__autograph_generated_file1.py").write_text("")
  assert conftest.remove_suite_tmpdir(str(folder)) is None
  assert not folder.exists()
  # A file that cannot be removed: immutable (chattr +i) for root, in a read-only folder else.
  locked = tmp_path / "locked"
  (locked / "inner").mkdir(parents=True)
  stuck = locked / "inner" / "file"
  stuck.write_text("")
  if os.geteuid() == 0:
    lock, unlock = ["chattr", "+i", str(stuck)], ["chattr", "-i", str(stuck)]
  else:
    lock, unlock = ["chmod", "500", str(stuck.parent)], ["chmod", "700", str(stuck.parent)]
  if subprocess.run(lock, capture_output=True, timeout=30).returncode != 0:
    pytest.skip(f"{lock[0]} cannot lock a file here")
  try:
    left = conftest.remove_suite_tmpdir(str(locked))
  finally:
    subprocess.run(unlock, capture_output=True, timeout=30, check=True)
  assert left == (f"the suite's temporary folder {locked} is not removed whole (a process the "
                  "suite started may still write there)")


SUITE_RUN = """
def test_one():
  assert OUTCOME
"""


@pytest.mark.slow
@pytest.mark.parametrize("outcome", ["True", "False"])
def test_a_run_removes_its_folder_when_it_passes_and_keeps_and_names_it_when_it_fails(
    outcome, tmp_path):
  (tmp_path / "test_run.py").write_text(SUITE_RUN.replace("OUTCOME", outcome))
  machines = tmp_path / "tmp"
  machines.mkdir()
  tests = os.path.dirname(os.path.abspath(__file__))
  env = {conftest.SUITE_TMPDIR: "", "TMPDIR": str(machines),  # As a run of its own,
         "PYTEST_ADDOPTS": "",  # not writing into this run's --cpu-lines.
         "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
  result = helpers.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "conftest", "--rootdir", str(tmp_path), str(tmp_path)],
                       timeout=300, env=env)
  left = [p.name for p in machines.iterdir() if p.name.startswith("tfd-")]
  if outcome == "True":
    assert result.returncode == 0, result.stdout[-3000:]
    assert left == [] and "kept in" not in result.stdout
  else:
    assert result.returncode == 1, result.stdout[-3000:]
    assert len(left) == 1, left
    assert conftest.kept_line(str(machines / left[0])) in result.stdout


def _reports(nodeid, phases, seconds, alone=False):
  """A test's reports as pytest makes them, `phases` (when, outcome) in order; the teardown's
  carries the CPU seconds and the `alone` mark (conftest's pytest_runtest_makereport)."""
  return [pytest.TestReport(nodeid, ("t.py", 1, nodeid), {}, outcome, None, when,
                            user_properties=[("cpu_seconds", seconds), ("alone", alone)]
                            if when == "teardown" else [])
          for when, outcome in phases]


def test_each_tests_cpu_line_says_whether_it_passed_and_whether_it_is_marked_alone():
  counts = conftest.CpuCounts()
  tests = {
      "t.py::passes": [("setup", "passed"), ("call", "passed"), ("teardown", "passed")],
      "t.py::fails": [("setup", "passed"), ("call", "failed"), ("teardown", "passed")],
      "t.py::fails_in_teardown": [("setup", "passed"), ("call", "passed"),
                                  ("teardown", "failed")],
      "t.py::skipped": [("setup", "skipped"), ("teardown", "passed")],  # No call report.
      "t.py::alone": [("setup", "passed"), ("call", "passed"), ("teardown", "passed")]}
  for nodeid, phases in tests.items():
    for report in _reports(nodeid, phases, 2.5, alone=nodeid == "t.py::alone"):
      counts.log(report)
  lines = [json.loads(line) for line in counts.lines(".venv", "2.21.0")]
  assert {(line["test"], line["passed"], line["alone"]) for line in lines} == {
      ("t.py::passes", True, False), ("t.py::fails", False, False),
      ("t.py::fails_in_teardown", False, False), ("t.py::skipped", False, False),
      ("t.py::alone", True, True)}
  assert {line["cpu_seconds"] for line in lines} == {2.5}
  assert {(line["virtualenv"], line["tensorflow"]) for line in lines} == {(".venv", "2.21.0")}
  # Only a passed test not marked `alone` is compared with the reference run.
  assert counts.comparable() == {"t.py::passes": 2.5}
