"""tests/suite_cpu.py: the hour's speed from a run's CPU per test, and the tests a change made heavier."""

import json
import os
import sys

import pytest

import helpers
import suite_cpu


def _reference(count=20, seconds=4.0):
  return {f"t{i}": seconds + i for i in range(count)}


def test_a_slower_hour_is_the_median_ratio_and_names_no_test():
  reference = _reference()
  now = {name: 1.5 * seconds for name, seconds in reference.items()}
  comparison = suite_cpu.compare(now, reference)
  assert comparison.ratio == pytest.approx(1.5)
  assert comparison.tests == 20 and comparison.heavier == []


def test_a_heavier_test_is_named_with_what_the_ratio_predicts():
  reference = _reference()
  now = {name: 1.2 * seconds for name, seconds in reference.items()}
  now["t3"] = 3 * reference["t3"]  # 21 s where 1.2 x 7 s = 8.4 s were predicted.
  comparison = suite_cpu.compare(now, reference)
  assert comparison.ratio == pytest.approx(1.2)
  assert [(name, round(predicted, 2)) for name, _, predicted in comparison.heavier] == [("t3", 8.4)]


def test_the_largest_excess_comes_first_not_the_largest_cpu():
  reference = dict(_reference(), big=20.0, small=5.0, mid=8.0)
  now = dict(reference, big=31.0, small=17.0, mid=16.0)  # Over by 11, 12 and 8 s.
  comparison = suite_cpu.compare(now, reference)
  assert comparison.ratio == 1.0
  assert [name for name, _, _ in comparison.heavier] == ["small", "big", "mid"]
  assert [name for name, _, _ in suite_cpu.compare(now, reference, count=1).heavier] == ["small"]


def test_small_excesses_light_tests_and_tests_not_run_are_left_out():
  reference = dict(_reference(), light=0.5, gone=30.0)
  now = {name: seconds for name, seconds in reference.items() if name != "gone"}
  now["light"] = 10.0  # Under the floor in the reference: noise, not compared.
  now["t0"] = 6.0  # 2 s over 4 s: 1.5 times, under MIN_EXCESS_SECONDS.
  now["t19"] = 30.0  # 7 s over 23 s: over MIN_EXCESS_SECONDS, under MIN_EXCESS_RATIO.
  comparison = suite_cpu.compare(now, reference)
  assert comparison.tests == 20 and comparison.heavier == []


def test_too_few_tests_in_common_give_no_ratio_and_a_floor_must_be_positive():
  reference = _reference()
  now = {f"t{i}": 9.0 for i in range(suite_cpu.MIN_TESTS - 1)}
  assert suite_cpu.compare(now, reference) is None
  now["t19"] = 9.0
  assert suite_cpu.compare(now, reference).tests == suite_cpu.MIN_TESTS
  with pytest.raises(ValueError, match=r"floor must be over 0 seconds. Received: floor=0"):
    suite_cpu.compare(now, dict(reference, zero=0.0), floor=0)


def _write(path, **fields):
  reference = {"date": "2026-11-30 21:27 UTC", "commit": "abc1234", "virtualenv": ".venv",
               "tensorflow": "2.21.0", "cpu_seconds": _reference()}
  reference.update(fields)
  path.write_text(json.dumps(reference))
  return str(path)


def test_the_summary_says_the_ratio_and_the_heavier_tests(tmp_path):
  path = _write(tmp_path / "reference.json")
  now = {name: 1.2 * seconds for name, seconds in _reference().items()}
  lines = suite_cpu.summary(now, tensorflow="2.21.0", virtualenv=".venv", path=path)
  assert "(2026-11-30 21:27 UTC, abc1234" in lines[0]
  assert "the 20 tests that used 2 s of CPU or more there used a median 1.20 times" in lines[0]
  assert lines[-1].startswith("no test was heavier by at least 4 s and 1.5 times")
  now["t3"] = 21.0
  lines = suite_cpu.summary(now, tensorflow="2.21.0", virtualenv=".venv", path=path)
  assert lines[-2].startswith("heavier by at least 4 s and 1.5 times")
  assert lines[-1] == "    21.0s cpu, 8.4s predicted  t3"


def test_another_virtualenv_tensorflow_or_too_few_tests_say_why_they_are_not_compared(tmp_path):
  path = _write(tmp_path / "reference.json")
  now = _reference()
  assert suite_cpu.summary(now, tensorflow="2.17.1", virtualenv=".venv-oldest", path=path) == [
      "(the reference run ran .venv on TensorFlow 2.21.0, this one .venv-oldest on 2.17.1: "
      "not compared)"]
  # The CPU-only stack has the test virtualenv's TensorFlow version.
  assert "not compared" in suite_cpu.summary(now, tensorflow="2.21.0", virtualenv=".venv-cpu",
                                             path=path)[0]
  assert suite_cpu.summary({"t0": 1.0}, tensorflow="2.21.0", virtualenv=".venv", path=path) == [
      f"(fewer than {suite_cpu.MIN_TESTS} tests that passed here, not marked `alone`, used 2 s of "
      "CPU or more in the reference run: not compared)"]


@pytest.mark.parametrize("content", ["{not json", json.dumps({"date": "d"}),
                                     json.dumps([1, 2]), None])
def test_an_unreadable_reference_is_said_and_a_missing_one_is_silent(tmp_path, content):
  path = tmp_path / "reference.json"
  if content is None:
    path = _write(path, cpu_seconds={"t0": "many"})
  else:
    path.write_text(content)
  lines = suite_cpu.summary(_reference(), tensorflow="2.21.0", virtualenv=".venv", path=str(path))
  assert len(lines) == 1 and "could not be read, so this run is not compared" in lines[0], lines
  assert suite_cpu.summary(_reference(), tensorflow="2.21.0", virtualenv=".venv",
                           path=str(tmp_path / "missing.json")) == []


def test_the_committed_reference_says_when_where_and_what_it_measured():
  with open(suite_cpu.REFERENCE, encoding="utf-8") as f:
    reference = json.load(f)
  assert {"date", "commit", "machine", "command", "virtualenv", "tensorflow"} <= set(reference)
  seconds = reference["cpu_seconds"]
  assert len(seconds) >= 100 and min(seconds.values()) >= 1.0
  assert all(name.startswith("tests/") and "::" in name for name in seconds)


def test_the_reference_script_keeps_one_virtualenvs_passed_tests_not_alone_and_refuses_none(
    tmp_path):
  lines = tmp_path / "cpu.jsonl"
  rows = [("a", 3.0, ".venv-cpu", True), ("a", 5.0, ".venv", True), ("b", 0.4, ".venv", True),
          ("c", 1.0, ".venv", True), ("d", 9.0, ".venv", False), ("e", 2.0, ".venv-oldest", True),
          ("f", 7.0, ".venv", "alone")]
  lines.write_text("".join(
      json.dumps({"test": t, "cpu_seconds": s, "virtualenv": v, "passed": bool(p),
                  "alone": p == "alone",
                  "tensorflow": "2.17.1" if v == ".venv-oldest" else "2.21.0"}) + "\n"
      for t, s, v, p in rows))
  script = os.path.join(helpers.REPO, "benchmarks", "suite_cpu_reference.py")
  flags = ["--date=2026-11-30 21:27 UTC", "--commit=abc1234", "--machine=here"]
  done = helpers.run([sys.executable, script, str(lines)] + flags, timeout=60)
  assert done.returncode == 0, done.stdout
  reference = json.loads(done.stdout)
  assert (reference["virtualenv"], reference["tensorflow"], reference["commit"]) == (
      ".venv", "2.21.0", "abc1234")
  assert reference["cpu_seconds"] == {"a": 5.0, "c": 1.0}
  done = helpers.run([sys.executable, script, str(lines), "--virtualenv=.venv-newest"] + flags,
                     timeout=60)
  assert done.returncode == 1
  assert f"No test that passed in .venv-newest used a second of CPU in {lines}" in done.stdout
