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


@pytest.mark.parametrize("reads", [1, 3])
def test_a_call_stopped_by_an_exception_keeps_no_local_once_its_frames_are_cleared(reads):
  """Before Python 3.13, reading `f_locals` left a copy of every local on the frame.

  `traceback.clear_frames` does not free that copy: a `fit` interrupted by an exception
  kept its iterators alive until a garbage collection, which then waited on their
  autotune threads.
  """
  found = []

  def interrupt():
    for _ in range(reads):
      found.append(weakref.ref(frames.running_local(_fit, "iterator")))
    raise RuntimeError("interrupted")

  with pytest.raises(RuntimeError) as raised:
    _fit(interrupt)
  assert found[0]() is not None  # The traceback's frames still hold it.
  traceback.clear_frames(raised.tb)
  gc.collect()  # Nothing but the copy would keep it now; no cycle holds it either.
  assert [ref() for ref in found] == [None] * reads, sys.version
