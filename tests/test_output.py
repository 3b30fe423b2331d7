"""tfdist.output: library code logs; the `tfdist` logger shows, silences and redirects."""

import subprocess
import sys

import pytest

import helpers
from tfdist import output

SAY = ("import logging, tfdist; log = logging.getLogger('tfdist'); "
       "log.info('an info line'); log.warning('a warning')")


def _python(code: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=60, check=True)


def test_info_goes_to_stdout_and_warnings_to_stderr_as_bare_messages():
  done = _python(SAY)
  assert done.stdout == "an info line\n" and done.stderr == "a warning\n"


def test_lines_look_the_same_whatever_sets_up_logging_and_go_to_yours_on_request():
  # Before: any root handler (a library's implicit basicConfig too) took the
  # records, and the lines changed format with the libraries imported.
  setup = "import logging; logging.basicConfig(format='app: %(message)s'); "
  done = _python(setup + SAY)
  assert done.stdout == "an info line\n" and done.stderr == "a warning\n"
  done = _python(setup + "import tfdist; tfdist.output.use_root_handlers(); " +
                 SAY.split("; ", 1)[1])
  # basicConfig leaves the root at WARNING, but a record of tfdist's own level
  # reaches the root's handler: once, in the application's format.
  assert done.stdout == "" and done.stderr == "app: an info line\napp: a warning\n"


def test_it_can_be_silenced_by_level_or_by_name():
  done = _python("import logging; logging.getLogger('tfdist').setLevel(logging.WARNING); " + SAY)
  assert done.stdout == "" and done.stderr == "a warning\n"
  done = _python("import logging, tfdist; tfdist.output.set_verbosity('error'); "
                 + SAY.split("; ", 1)[1])
  assert done.stdout == "" and done.stderr == ""


def test_a_bad_verbosity_names_the_choices():
  with pytest.raises(ValueError, match=r"`verbosity` must be one of \['debug', 'info', "
                                       r"'warning', 'error'\]. Received: 'loud'"):
    output.set_verbosity("loud")


def test_a_main_shows_tfdist_on_the_console_beside_absl_handlers():
  # absl's app.run puts its handler on the root logger; a main's lines still show
  # as they always printed, on stdout, and only once.
  code = ("import logging; from absl import logging as absl_logging; "
          "absl_logging.use_absl_handler(); from tfdist import output; "
          "output.use_root_handlers(); output.show_on_console(); " + SAY)
  done = _python(code)
  assert done.stdout == "an info line\n"
  assert done.stderr.count("a warning") == 1


@pytest.mark.slow
def test_the_cli_verbosity_flag_quietens_tfdist_lines():
  common = ["train", "--epochs=2", "--batch_size=256"]
  shown = helpers.run(helpers.tfdist_cli(*common), timeout=120)
  quiet = helpers.run(helpers.tfdist_cli(*common, "--verbosity=-1"), timeout=120)
  assert shown.returncode == quiet.returncode == 0, quiet.stdout[-2000:]
  # The input-bound report is tfdist's line (Keras's epoch lines are Keras's, --verbose).
  assert "input-bound:" in shown.stdout and "input-bound:" not in quiet.stdout
  # The main's own result line is printed either way.
  assert "strategy=one_device" in shown.stdout and "strategy=one_device" in quiet.stdout


def test_a_duration_reads_as_seconds_then_minutes_then_hours():
  assert [output.duration(s) for s in (23.4, 99, 14 * 60, 2 * 3600 + 5 * 60)] == [
      "23s", "99s", "14 min", "2 h 05 min"]


def test_runs_so_far_say_the_time_in_all_and_about_how_long_the_rest_takes():
  assert output.so_far(1, 6, 12.0) == "12s in all, about 60s left"
  assert output.so_far(3, 6, 300.0) == "5 min in all, about 5 min left"
  assert output.so_far(6, 6, 400.0) == "7 min in all"  # Nothing left: no estimate.


def test_each_stage_of_a_long_command_says_which_of_how_many_with_the_time_so_far():
  now = [100.0]
  stages = output.Stages(3, start=100.0, clock=lambda: now[0])
  lines = [stages.next("timing the ways on 2 device(s), side by side")]
  now[0] = 130.0
  lines.append(stages.next("timing 2 workers on this machine"))
  now[0] = 160.0
  lines.append(stages.next("timing the input pipeline (2 epochs on one device)"))
  assert lines == [
      "[1/3] timing the ways on 2 device(s), side by side...",
      "[2/3] timing 2 workers on this machine... (30s in all, about 60s left)",
      "[3/3] timing the input pipeline (2 epochs on one device)... (60s in all, about 30s left)"]
  # A stage past the count (a stage added late) says the time so far, and nothing left.
  now[0] = 190.0
  assert stages.next("one more") == "[4/3] one more... (90s in all)"
