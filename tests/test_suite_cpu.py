"""tests/suite_cpu.py: the hour's speed from a run's CPU per test, and the tests a change made heavier."""

import json
import os
import sys

import pytest
import tensorflow as tf

import helpers
import suite_cpu


def _reference(count=20, seconds=4.0):
  return {f"t{i}": seconds + i for i in range(count)}


def test_a_slower_hour_is_the_median_ratio_and_names_no_test():
  reference = _reference()
  now = {name: 1.5 * seconds for name, seconds in reference.items()}
  comparison = suite_cpu.compare(now, reference)
  assert comparison.speed == pytest.approx(1.5)
  assert comparison.tests == 20 and comparison.heavier == []


def test_a_heavier_test_is_named_with_what_the_speed_predicts():
  reference = _reference()
  now = {name: 1.2 * seconds for name, seconds in reference.items()}
  now["t3"] = 3 * reference["t3"]  # 21 s where 1.2 x 7 s = 8.4 s were expected.
  comparison = suite_cpu.compare(now, reference)
  assert comparison.speed == pytest.approx(1.2)
  assert [(name, round(expected, 2)) for name, _, expected in comparison.heavier] == [("t3", 8.4)]


def test_the_heaviest_by_seconds_come_first_and_at_most_count():
  reference = _reference()
  now = dict(reference)
  for name in ("t1", "t2", "t3", "t4", "t5", "t6", "t7"):
    now[name] = 2 * reference[name]
  comparison = suite_cpu.compare(now, reference, count=3)
  assert [name for name, _, _ in comparison.heavier] == ["t7", "t6", "t5"]


def test_small_gains_light_tests_and_tests_not_run_are_left_out():
  reference = dict(_reference(), light=0.5, gone=30.0)
  now = {name: seconds for name, seconds in reference.items() if name != "gone"}
  now["light"] = 10.0  # Under the floor in the reference: noise, not compared.
  now["t0"] = 6.0  # 2 s over 4 s: under min_excess.
  now["t19"] = 27.0  # 4 s over 23 s: over min_excess, under a third more.
  comparison = suite_cpu.compare(now, reference)
  assert comparison.tests == 20 and comparison.heavier == []


def test_too_few_tests_in_common_give_no_speed():
  reference = _reference()
  now = {f"t{i}": 9.0 for i in range(suite_cpu.MIN_TESTS - 1)}
  assert suite_cpu.compare(now, reference) is None
  now["t19"] = 9.0
  assert suite_cpu.compare(now, reference).tests == suite_cpu.MIN_TESTS


def test_the_report_says_the_speed_and_the_heavier_tests():
  reference = _reference()
  now = {name: 1.2 * seconds for name, seconds in reference.items()}
  meta = {"date": "2026-11-30 21:27 UTC", "commit": "abc1234"}
  lines = suite_cpu.report(suite_cpu.compare(now, reference), meta)
  assert "(2026-11-30 21:27 UTC, abc1234" in lines[0] and "a median 1.20 times as much" in lines[0]
  assert lines[-1] == "no test used a third more than that speed predicts."
  now["t3"] = 21.0
  lines = suite_cpu.report(suite_cpu.compare(now, reference), meta)
  assert lines[-1] == "    21.0s cpu  against 8.4  t3"


def test_a_reference_keeps_one_tensorflows_tests_of_a_second_or_more(tmp_path):
  lines = tmp_path / "cpu.jsonl"
  rows = [("a", 3.0, "2.17.1"), ("a", 5.0, "2.21.0"), ("b", 0.4, "2.21.0"), ("c", 1.0, "2.21.0"),
          ("d", 2.0, None)]
  lines.write_text("".join(
      json.dumps({"test": t, "cpu_seconds": s, **({"tensorflow": v} if v else {})}) + "\n"
      for t, s, v in rows))
  assert suite_cpu.reference_from_lines(str(lines), "2.21.0") == {"a": 5.0, "c": 1.0}


def test_the_committed_reference_says_when_where_and_what_it_measured():
  reference = suite_cpu.load()
  assert {"date", "commit", "machine", "command", "tensorflow"} <= set(reference)
  seconds = reference["cpu_seconds"]
  assert len(seconds) >= 100 and min(seconds.values()) >= 1.0
  assert all(name.startswith("tests/") and "::" in name for name in seconds)
  assert suite_cpu.load(str(suite_cpu.REFERENCE) + ".missing") is None


def test_the_reference_script_writes_the_installed_tensorflows_tests_and_refuses_none(tmp_path):
  lines = tmp_path / "cpu.jsonl"
  lines.write_text("".join(json.dumps({"test": f"tests/test_x.py::t{i}", "cpu_seconds": 2.0 + i,
                                       "tensorflow": version}) + "\n"
                           for i, version in enumerate([tf.__version__, "2.17.1", tf.__version__])))
  script = os.path.join(helpers.REPO, "benchmarks", "suite_cpu_reference.py")
  flags = ["--date=2026-11-30 21:27 UTC", "--commit=abc1234", "--machine=here"]
  done = helpers.run([sys.executable, script, str(lines)] + flags, timeout=60)
  assert done.returncode == 0, done.stdout
  reference = json.loads(done.stdout)
  assert reference["tensorflow"] == tf.__version__ and reference["commit"] == "abc1234"
  assert reference["cpu_seconds"] == {"tests/test_x.py::t0": 2.0, "tests/test_x.py::t2": 4.0}
  lines.write_text(json.dumps({"test": "t", "cpu_seconds": 9.0, "tensorflow": "2.17.1"}) + "\n")
  done = helpers.run([sys.executable, script, str(lines)] + flags, timeout=60)
  assert done.returncode == 1
  assert f"No test of TensorFlow {tf.__version__} used a second of CPU in {lines}" in done.stdout
