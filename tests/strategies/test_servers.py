"""tfdist.strategies._servers: worker and ps tasks serve while the chief trains, then end by themselves."""

import signal
import socket
import time

import pytest

import helpers
from tfdist.strategies import _servers as servers
from tfdist.cluster import ClusterSpec

SERVE = "import tfdist; tfdist.make_strategy('parameter_server')"


@pytest.mark.slow
def test_a_ps_task_waits_for_the_chief_then_ends_with_0_once_it_is_gone():
  # Before: the ps joined its server forever, so a SLURM step or a Kubernetes
  # Job of it ran until its time limit after the chief had finished.
  spec = ClusterSpec.local(workers=1, ps=1, chief=True)
  chief_address = spec.jobs["chief"][0]
  with helpers.spawned(helpers.python("-c", SERVE),
                       env={"TF_CONFIG": spec.tf_config("ps", 0)}) as process:
    for line in process.stdout:
      if "tfdist: serving as ps:0" in line:
        break
    # A chief that has not started yet is not gone: wait longer than the grace.
    time.sleep(servers.CHIEF_GONE_SECONDS + 1)
    assert process.poll() is None
    chief = socket.create_server(("localhost", int(chief_address.rsplit(":", 1)[1])))
    # Up until the ps has seen it, however late a busy machine lets it probe:
    # its probe is a connection, so the accepted one is the proof.
    chief.settimeout(60)
    chief.accept()[0].close()
    chief.close()
    closed = time.monotonic()
    output = process.communicate(timeout=30)[0]
    ended = time.monotonic() - closed
  assert process.returncode == 0, output
  assert f"the chief at {chief_address} has finished; ps:0 stops serving" in output
  # It waited the grace, and ended within seconds of it.
  assert servers.CHIEF_GONE_SECONDS <= ended < servers.CHIEF_GONE_SECONDS + 5, ended


@pytest.mark.slow
def test_a_ps_task_serves_on_after_sigterm_until_the_chief_has_gone():
  # Before: the SIGTERM a scheduler sends every task ended the ps at once, and
  # the chief's backup, which reads the variables from it, failed.
  spec = ClusterSpec.local(workers=1, ps=1, chief=True)
  chief_address = spec.jobs["chief"][0]
  chief = socket.create_server(("localhost", int(chief_address.rsplit(":", 1)[1])))
  with helpers.spawned(helpers.python("-c", SERVE),
                       env={"TF_CONFIG": spec.tf_config("ps", 0)}) as process:
    for line in process.stdout:
      if "tfdist: serving as ps:0" in line:
        break
    chief.settimeout(60)
    chief.accept()[0].close()  # The ps has seen its chief.
    process.send_signal(signal.SIGTERM)
    time.sleep(2)
    assert process.poll() is None  # Still serving: the chief may be backing up.
    chief.close()
    closed = time.monotonic()
    output = process.communicate(timeout=60)[0]
    ended = time.monotonic() - closed
  assert process.returncode == 128 + signal.SIGTERM, output
  assert f"the chief at {chief_address} has finished; ps:0 stops serving" in output
  # Stopped, and its chief's port refuses: gone, without the grace for a busy chief.
  assert ended < servers.CHIEF_GONE_SECONDS, ended


@pytest.mark.slow
def test_the_host_network_is_not_private_and_a_namespace_is():
  assert not servers.network_is_private()  # This machine has more than loopback.
  result = helpers.run(["unshare", "--user", "--map-root-user", "--net", "--",
                        *helpers.python("-c", "from tfdist.strategies import _servers as servers; "
                                        "print(servers.network_is_private())")], timeout=60)
  assert result.stdout.strip().splitlines()[-1] == "True", result.stdout
