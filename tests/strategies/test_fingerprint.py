"""tfdist.strategies._fingerprint: workers whose models differ are refused, naming the variable."""

import os
import re

import pytest

import helpers
from tfdist.strategies import _fingerprint as fingerprint


def test_the_fingerprint_names_what_every_worker_must_share():
  fields = fingerprint.fingerprint()
  assert set(fields) == {"tfdist", "tensorflow", "keras", "keras in use", "python", "devices",
                         "cluster spec"}
  assert "CPU" in fields["devices"]


@pytest.mark.slow
def test_workers_whose_models_differ_get_the_named_error_on_every_task():
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--workers=2", "--grace_period=2", "--",
      *helpers.python(os.path.join(helpers.SCRIPTS, "differ.py"))), timeout=120)
  assert result.returncode != 0
  error = (r"ValueError: Workers disagree before their first collective: variable \d+, "
           r"dense/kernel: \(4, 32\) float32 on worker:0, \(4, 64\) float32 on worker:1\.")
  # Each task raises it, before TensorFlow's broadcast ("Shape mismatch in the collective").
  assert re.search(r"\[worker:0\] " + error, result.stdout), result.stdout[-3000:]
  assert re.search(r"\[worker:1\] " + error, result.stdout), result.stdout[-3000:]
  assert "Shape mismatch" not in result.stdout
  assert "trained" not in result.stdout
