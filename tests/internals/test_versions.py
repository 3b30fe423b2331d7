"""tfdist.internals.versions: a private use runs only on the versions it was tested with."""

import logging

import pytest

from tfdist.internals import versions

# Version-sensitive: `make test-versions` runs it on the oldest and newest supported TensorFlow too.
pytestmark = pytest.mark.versions


def test_versions_parse_to_major_and_minor():
  assert versions.parse("2.21.0") == (2, 21)
  assert versions.parse("3.15.0.dev2025") == (3, 15)
  assert versions.parse("2.22rc1") == (2, 22)


def test_an_untested_version_is_named_and_not_applied(caplog):
  caplog.set_level(logging.WARNING, logger="tfdist")
  tested = ((2, 21), (2, 21))
  assert versions.check("TensorFlow", (2, 21), tested, "a patch", "org/repo#1")
  assert not caplog.text
  assert not versions.check("TensorFlow", (2, 22), tested, "a patch", "org/repo#1")
  assert ("tfdist's a patch (org/repo#1) is tested with TensorFlow 2.21 to 2.21 and is not "
          "applied to TensorFlow 2.22") in caplog.text
  assert versions.untested_reason("Keras", None, tested, "x", "y") == "Keras is not installed"
