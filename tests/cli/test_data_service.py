"""`tfdist data_service`: a tf.data service server as a process (launchers start it)."""

import pytest

import helpers


@pytest.mark.slow
def test_a_worker_without_its_dispatcher_is_refused_with_the_fix():
  done = helpers.run(helpers.tfdist_cli("data_service", "--role=worker", "--port=0"), timeout=60)
  assert done.returncode == 2
  assert "a worker needs --dispatcher_address=host:port" in done.stdout


def test_the_launchers_server_process_refuses_what_it_cannot_take():
  """`python -m tfdist.launch._serve_data_service`, which launchers start beside the tasks."""
  module = ["-m", "tfdist.launch._serve_data_service"]
  bad = helpers.run(helpers.python(*module, "--role=worker", "--colour=red"), timeout=60)
  assert bad.returncode == 2
  assert bad.stdout.strip().splitlines()[-1] == (
      "tfdist data service: error: unrecognized arguments: --colour=red")
  role = helpers.run(helpers.python(*module, "--role=chief", "--port=0"), timeout=60)
  assert role.returncode == 2
  assert role.stdout.strip().splitlines()[-1] == (
      "tfdist data service: error: argument --role: invalid choice: 'chief' (choose from "
      "'dispatcher', 'worker')")
  alone = helpers.run(helpers.python(*module, "--role=worker", "--port=0"), timeout=60)
  assert alone.returncode == 2
  assert alone.stdout.strip().splitlines()[-1] == (
      "tfdist data service: a worker needs --dispatcher_address=host:port. "
      "Received: --dispatcher_address unset")
