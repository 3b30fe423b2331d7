"""tests/conftest.py: after each test its garbage is collected and what outlives it frozen, and
the processes the suite starts keep their temporary files in a folder of its own."""

import gc
import json
import os
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
  assert os.path.basename(folder).startswith("tfdist-suite-") and os.path.isdir(folder)
  # pytest's own folders stay outside it: they outlive the run.
  assert not str(tmp_path).startswith(folder + os.sep)


def test_the_suites_folder_goes_when_the_run_passes_and_is_named_when_it_fails(tmp_path):
  folder = tmp_path / "tfdist-suite-x"
  (folder / "ray").mkdir(parents=True)
  (folder / "__autograph_generated_file1.py").write_text("")
  kept = conftest.end_suite_tmpdir(str(folder), passed=False)
  assert kept == f"the temporary files of the processes the suite started are kept in {folder}"
  assert (folder / "__autograph_generated_file1.py").exists()
  assert conftest.end_suite_tmpdir(str(folder), passed=True) is None
  assert not folder.exists()


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
