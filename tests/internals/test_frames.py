"""tfdist/internals/frames.py: a running call's local, read without keeping it alive."""

import gc
import sys
import traceback
import weakref

import pytest

from tfdist.internals import frames


class _Iterator:
  """Stands in for a tf.data iterator: an object only `fit`'s frame holds."""


def _fit(callback):
  iterator = _Iterator()  # pylint: disable=unused-variable  Read through the frame.
  callback()


def test_reads_the_innermost_running_calls_local():
  seen = []
  _fit(lambda: seen.append(frames.running_local(_fit, "iterator")))
  assert isinstance(seen[0], _Iterator)
  assert frames.running_local(_fit, "iterator") is None  # No `_fit` running.
  _fit(lambda: seen.append(frames.running_local(_fit, "no_such_local")))
  assert seen[1] is None
  # A `_fit` inside a `_fit`: the inner one's.
  _fit(lambda: _fit(lambda: seen.extend(
      [frames.running_local(_fit, "iterator"), sys._getframe(1).f_locals["iterator"]])))
  assert seen[2] is seen[3] and isinstance(seen[2], _Iterator)


@pytest.mark.parametrize("calls", [1, 2])
def test_a_call_stopped_by_an_exception_keeps_no_local_once_its_frames_are_cleared(calls):
  """Reading `f_locals` left a copy of every local on the frame (Python 3.11.7 here).

  `traceback.clear_frames` did not free that copy: a `fit` interrupted by an exception
  kept its iterators alive until a garbage collection, which then waited on their
  autotune threads. With two calls, the inner one's local was read and both were stopped.
  """
  found = []

  def interrupt():
    found.append(weakref.ref(frames.running_local(_fit, "iterator")))
    raise RuntimeError("interrupted")

  with pytest.raises(RuntimeError) as raised:
    if calls == 1:
      _fit(interrupt)
    else:
      _fit(lambda: _fit(interrupt))
  assert found[0]() is not None  # The traceback's frames still hold it.
  traceback.clear_frames(raised.tb)
  gc.collect()  # Nothing but the copy would keep it now; no cycle holds it either.
  assert found[0]() is None, sys.version


def test_a_call_read_from_a_tracer_keeps_its_locals():
  """A debugger reads a frame's locals from its trace function, between two of its lines.

  Python writes the frame's copy of its locals back into the frame after each trace event:
  an emptied copy would unbind every local of the call, here `callback`.
  """
  read = []

  def tracer(frame, event, arg):
    if frame.f_code is _fit.__code__ and event == "line" and "iterator" in frame.f_locals:
      read.append(frames.running_local(_fit, "iterator"))  # Called from the trace function.
    return tracer

  called = []
  sys.settrace(tracer)
  try:
    _fit(lambda: called.append(True))
  finally:
    sys.settrace(None)
  assert called == [True] and isinstance(read[0], _Iterator)
