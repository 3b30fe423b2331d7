"""A running job you can watch: each task's status line, and progress bars redrawn with `\\r`."""

import io
import os
import re
import subprocess
import sys
import threading

import pytest

import helpers
from tfdist.task import progress
from tfdist.launch import _supervision as supervision

EVERY = supervision.REDRAW_SECONDS


def _bar(step: int, width: int = 12) -> bytes:
  """One redraw of a Keras-like bar: back over the last one, `\\r`, the new state."""
  return b"\b" * width + b"\r" + f"bar {step:2d}/9 ...".encode()


def test_lines_that_end_with_a_newline_are_passed_on_as_they_were():
  lines = supervision.OutputLines()
  assert lines.feed(b"one\ntw", 0.0) == ["one"]
  assert lines.feed(b"o\n\nbad \xff byte\n", 0.0) == ["two", "", "bad \ufffd byte"]
  assert lines.feed(b"no end", 0.0) == []
  assert lines.wait(0.0) is None  # Nothing held back: the reader waits for output.
  assert lines.close() == ["no end"]


def test_a_redrawn_line_is_passed_on_once_every_few_seconds_and_its_last_state_always():
  lines = supervision.OutputLines()
  assert lines.feed(b"Epoch 1/3\n", 0.0) == ["Epoch 1/3"]
  assert lines.feed(b"\r" + b"bar  1/9 ...", 0.0) == []  # Not yet ended: it may go on.
  assert lines.feed(_bar(2), 0.1) == ["bar  1/9 ..."]  # The first state: at once.
  assert lines.feed(_bar(3) + _bar(4), 0.2) == []  # Held back.
  assert lines.wait(0.2) == pytest.approx(EVERY - 0.1)
  assert lines.due(1.0) == []
  assert lines.due(0.1 + EVERY) == ["bar  3/9 ..."]  # The reader's wait ran out: the newest.
  assert lines.feed(_bar(5), 0.2 + EVERY) == []
  assert lines.feed(_bar(6), 0.2 + 2 * EVERY) == ["bar  5/9 ..."]  # Due again.
  assert lines.feed(_bar(7) + _bar(8) + _bar(9) + b"\n", 0.3 + 2 * EVERY) == ["bar  9/9 ..."]
  assert lines.wait(0.3 + 2 * EVERY) is None  # The line's end superseded what was held.
  assert lines.feed(b"after\n", 0.4 + 2 * EVERY) == ["after"]


def test_the_last_state_before_a_newline_alone_and_crlf_lines_are_passed_on_once():
  lines = supervision.OutputLines()
  assert lines.feed(b"50%\r", 0.0) == ["50%"]
  assert lines.feed(b"80%\r", 0.1) == []
  assert lines.feed(b"\n", 0.2) == ["80%"]  # The line ends on its last state.
  assert lines.feed(b"a\r\nb\r", 0.3) == ["a"]  # Windows line ends: each line once, no blank.
  assert lines.feed(b"\nc\r\n", 0.4) == ["b", "c"]
  assert lines.feed(b"d\r", 0.5) == []
  assert lines.close() == ["d"]  # The output ends: what was held is passed on.
  lines = supervision.OutputLines()
  assert lines.feed(_bar(1) + _bar(2) + _bar(3), 0.0) == ["bar  1/9 ..."]
  assert lines.close() == ["bar  3/9 ..."]  # Its newest state, drawn after the one held.


def test_the_launchers_reader_passes_redrawn_lines_on_without_waiting_for_a_newline():
  # One write: the reader reads it at once, so that which states are held back is certain.
  code = ("import os, sys; os.write(1, b'start\\n\\r1\\r2\\r3\\nend'); sys.stdin.read()")
  process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
  try:
    cluster = supervision.Cluster.__new__(supervision.Cluster)
    cluster.output, cluster.lock, tail = io.StringIO(), threading.Lock(), []
    reader = threading.Thread(target=cluster._pump, args=(process, "[t] ", tail), daemon=True)
    reader.start()
    process.stdin.close()  # The child exits: its output ends.
    process.wait(timeout=30)
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert cluster.output.getvalue() == "[t] start\n[t] 1\n[t] 3\n[t] end\n"
    assert tail == ["start", "1", "3", "end"]
  finally:
    process.kill()
    process.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("keras", ["tf_keras", "keras3"])
def test_each_task_shows_its_status_and_keras_bar_while_its_epoch_runs(keras):
  # One epoch of about 8 s; a status line every 2 s. By position in the output, not by time.
  result = helpers.run(
      helpers.tfdist_cli("launch", "--workers=2", f"--keras={keras}", "--timeout=120", "--",
                         *helpers.python(os.path.join(helpers.SCRIPTS, "status_fit.py"))),
      timeout=180, env={progress.STATUS_SECONDS_ENV: "2"})
  assert result.returncode == 0, result.stdout[-3000:]
  lines = result.stdout.splitlines()
  end = min(i for i, line in enumerate(lines) if "EPOCH END" in line)
  for worker in (0, 1):
    status = [i for i, line in enumerate(lines) if re.fullmatch(
        rf"\[worker:{worker}\] tfdist: worker:{worker} epoch 1/1, step \d+/32, [\d.]+ steps/s, "
        r"loss \d+\.\d{4}(e-\d\d)?, about \d+s left in this epoch", line)]
    assert status and status[0] < end, result.stdout[-3000:]
    # Keras's own bar, which redraws its line with `\r`, shows during the epoch too.
    bar = [i for i, line in enumerate(lines) if line.startswith(f"[worker:{worker}] ")
           and re.search(r"\b\d+/32\b", line) and "tfdist:" not in line]
    assert bar and bar[0] < end, result.stdout[-3000:]
