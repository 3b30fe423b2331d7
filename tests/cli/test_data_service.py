"""`tfdist data_service`: a tf.data service server as a process (launchers start it)."""

import pytest

import helpers


@pytest.mark.slow
def test_a_worker_without_its_dispatcher_is_refused_with_the_fix():
  done = helpers.run(helpers.tfdist_cli("data_service", "--role=worker", "--port=0"), timeout=60)
  assert done.returncode == 2
  assert "a worker needs --dispatcher_address=host:port" in done.stdout
