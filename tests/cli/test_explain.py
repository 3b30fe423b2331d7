"""`tfdist explain`: a dry run of distributed input, from the command line."""

import pytest

import helpers


@pytest.mark.slow
def test_explain_cli():
  result = helpers.run(helpers.tfdist_cli("explain", "--workers=2", "--devices_per_worker=2"),
                       timeout=120)
  assert result.returncode == 0, result.stdout[-2000:]
  assert "shard policy       FILE" in result.stdout
  assert "steps per epoch    22" in result.stdout
  bad = helpers.run(helpers.tfdist_cli("explain", "--workers=2", "--num_elements=10"),
                    timeout=120)
  assert bad.returncode == 1 and "could not run a single step" in bad.stdout
