"""tests/conftest.py: after each test its garbage is collected and what outlives it frozen."""

import gc
import weakref

import conftest


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
