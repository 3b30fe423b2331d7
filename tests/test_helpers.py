"""tests/helpers.py: a command that times out shows where each of its processes waited."""

import pytest

import helpers

WAITS = ("import threading\n"
         "def {name}():\n"
         "  threading.Event().wait()\n"
         "print('{name} started', flush=True)\n"
         "{name}()\n")


@pytest.mark.slow
def test_a_command_that_times_out_shows_the_stack_of_each_of_its_processes():
  # The command starts a child of its own; both wait for good, in functions named for them.
  child = WAITS.format(name="child_waits")
  parent = ("import subprocess, sys\n"
            f"child = subprocess.Popen([sys.executable, '-c', {child!r}])\n"
            + WAITS.format(name="parent_waits"))
  with pytest.raises(AssertionError) as failed:
    helpers.run(helpers.python("-c", parent), timeout=5)
  report = str(failed.value)
  assert "timed out after 5s" in report and "parent_waits started" in report, report
  assert "in parent_waits" in report and "in child_waits" in report, report
