"""A real 2-node Ray cluster for tests, on loopback only, in a private network namespace.

Outside a network namespace Ray advertises the machine's outside address, and
nothing may listen there; inside one that has only loopback (`unshare -rn`,
then loopback up) every Ray process binds and advertises 127.0.0.1.

`RayCluster.start()` runs this file as a program inside a new namespace: it
starts a head and one more node (two raylets, `ray.cluster_utils.Cluster`),
prints the head's address, and keeps them until its stdin closes. `run(...)`
runs a command inside the same namespace (`nsenter`), so it reaches the
cluster and nothing else. `stop()` ends it all.

The cluster takes only requests that carry its token (Ray's token
authentication, `RAY_AUTH_MODE=token`), as a cluster should; `env` holds the
address and the token a command needs.
"""

import os
import secrets
import signal
import subprocess
import sys
import time
from typing import Mapping, Optional, Sequence

import helpers

CPUS_PER_NODE = 2
# A custom resource each node has one of, as a cluster labels its machines;
# the nodes `remove_node` may take away also have one "removable".
NODE_RESOURCES = {"trainer_slot": 1}
REMOVABLE_RESOURCES = {**NODE_RESOURCES, "removable": 1}


class RayCluster:
  """The holder process, its namespace and the head's address."""

  def __init__(self):
    self.process: Optional[subprocess.Popen] = None
    self.address: Optional[str] = None
    self.auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}

  @property
  def env(self) -> dict:
    """What a command needs to use the cluster: its address and its token."""
    return {"RAY_ADDRESS": self.address, **self.auth}

  def start(self, timeout: float = 120) -> "RayCluster":
    self.process = subprocess.Popen(
        ["unshare", "--user", "--map-root-user", "--net", "--", sys.executable,
         os.path.abspath(__file__)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, env={**os.environ, **self.auth})
    deadline = time.monotonic() + timeout
    lines = []
    for line in self.process.stdout:
      lines.append(line)
      if line.startswith("RAY_ADDRESS "):
        self.address = line.split()[1]
        return self
      if time.monotonic() > deadline:
        break
    self.stop()
    raise RuntimeError("the Ray cluster did not start:\n" + "".join(lines[-40:]))

  def command(self, command: Sequence[str]) -> list:
    """`command`, run inside the cluster's network namespace."""
    return ["nsenter", f"--target={self.process.pid}", "--user", "--net",
            "--preserve-credentials", "--", *command]

  def run(self, command: Sequence[str], *, timeout: float,
          env: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess:
    return helpers.run(self.command(command), timeout=timeout, env={**self.env, **(env or {})})

  def remove_node(self) -> None:
    """Takes the newest non-head node away (its raylet and workers killed), as a lost machine."""
    self._ask("remove", "REMOVED")

  def add_node(self) -> None:
    """Adds a node again, as an autoscaler would."""
    self._ask("add", "ADDED")

  def _ask(self, request: str, answer: str) -> None:
    self.process.stdin.write(request + "\n")
    self.process.stdin.flush()
    for line in self.process.stdout:
      if line.strip() == answer:
        return
    raise RuntimeError(f"the Ray cluster holder did not answer {request!r}")

  def stop(self) -> None:
    if self.process is None:
      return
    try:
      self.process.stdin.close()  # The holder shuts Ray down...
      self.process.wait(timeout=60)
    except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
      pass
    try:
      os.killpg(self.process.pid, signal.SIGKILL)  # ...and whatever is left dies here.
    except ProcessLookupError:
      pass
    self.process.wait()
    self.process = None


def _hold() -> None:
  """Inside the namespace: a head and one more node until stdin closes."""
  from tfdist.launch import private_network  # pylint: disable=import-outside-toplevel
  private_network.loopback_up()
  from ray import cluster_utils  # pylint: disable=import-outside-toplevel
  # A lost node is noticed within about 2 s (Ray's defaults: 15 s, for real networks).
  cluster = cluster_utils.Cluster(
      initialize_head=True, head_node_args={
          "num_cpus": CPUS_PER_NODE, "resources": NODE_RESOURCES,
          "node_ip_address": "127.0.0.1", "include_dashboard": False,
          "_system_config": {"health_check_period_ms": 500,
                             "health_check_failure_threshold": 3}})
  add = lambda: cluster.add_node(num_cpus=CPUS_PER_NODE, resources=REMOVABLE_RESOURCES,
                                 node_ip_address="127.0.0.1")
  nodes = [add()]
  cluster.wait_for_nodes()
  print(f"RAY_ADDRESS {cluster.address}", flush=True)
  for line in sys.stdin:
    if line.strip() == "remove":
      cluster.remove_node(nodes.pop(), allow_graceful=False)
      print("REMOVED", flush=True)
    elif line.strip() == "add":
      nodes.append(add())
      cluster.wait_for_nodes()
      print("ADDED", flush=True)
  cluster.shutdown()


if __name__ == "__main__":
  _hold()
