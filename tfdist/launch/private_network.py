"""A private network for local clusters: tasks see only loopback, and nothing sees them.

TensorFlow's gRPC servers listen on every interface, whatever host the cluster
spec names (`ss -ltn` shows `*:PORT` for a task at `localhost:PORT`), and they
take unauthenticated requests. So a "local" cluster is open to the network.
On Linux, tfdist runs the tasks of an all-loopback cluster inside a new network
namespace that has only `lo`: they reach each other and nothing else, and
nothing outside reaches them.

One holder process creates the namespace (`unshare --user --map-root-user
--net`, which needs no privileges where user namespaces are enabled), brings
`lo` up and sleeps; every task joins it with `nsenter`.

Example:

    >>> with private_network.enter("auto", spec, print) as prefix:
    ...   subprocess.Popen(prefix + ["python", "train.py"], env=...)
"""

import contextlib
import shutil
import subprocess
import sys
from typing import Callable, Iterator, List, Optional

from tfdist import _variables as variables
from tfdist import cluster as cluster_lib
from tfdist.launch import _launcher as launcher_lib

# The holder: in the new namespace `lo` starts down; bring it up (SIOCGIFFLAGS,
# SIOCSIFFLAGS with IFF_UP), say so, then live until the launcher closes stdin.
_HOLDER = """
import sys
from tfdist.launch.private_network import loopback_up
loopback_up()
print("ready", flush=True)
sys.stdin.read()
"""


def loopback_up() -> None:
  """`ip link set lo up` in this process's network namespace, without iproute2.

  SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP; a new namespace's `lo` is down.
  """
  import fcntl  # pylint: disable=import-outside-toplevel  Linux-only.
  import socket  # pylint: disable=import-outside-toplevel
  import struct  # pylint: disable=import-outside-toplevel
  with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    request = struct.pack("16sH14s", b"lo", 0, b"")
    flags = struct.unpack("16sH14s", fcntl.ioctl(s, 0x8913, request))[1]
    fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"lo", flags | 1, b""))
_START_SECONDS = 10
# Where a command launches a cluster itself (tfdist train, bench, scale), the
# network a user chose: explicit argument, else this variable, else "auto".
NETWORK_ENV = variables.NETWORK


class Unavailable(launcher_lib.LaunchError):
  """This machine cannot create a private network namespace."""

  exit_code = 2


@contextlib.contextmanager
def enter(network: str, spec: cluster_lib.ClusterSpec,
          report: Callable[[str], None]) -> Iterator[List[str]]:
  """Yields the command prefix that runs a task in the cluster's network.

  Args:
    network: "loopback" (private namespace, or an error), "host" (no prefix),
      or "auto" (loopback for an all-loopback spec, the host's network for a
      spec that names real hosts).
    spec: the cluster.
    report: prints one line for the user.

  Raises:
    ValueError: "loopback" for a spec that names other hosts.
    Unavailable: no namespace can be created for an all-loopback spec, unless
      network is "host": TensorFlow's servers would be open to the network,
      so that takes the user's word.
  """
  if network == "host":
    yield []
    return
  if not spec.is_loopback:
    if network == "loopback":
      raise ValueError("network='loopback' needs a cluster on loopback addresses only; "
                       f"use network='host' for real hosts. Received: hosts {spec.hosts}")
    yield []
    return
  try:
    holder = _start_holder()
  except Unavailable as e:
    raise Unavailable(
        "no private network can be made here, and without one the tasks' TensorFlow "
        "servers would listen on every interface of this machine and take unauthenticated "
        "requests from any host that reaches their ports. To run on this machine's "
        f"network anyway, pass --network=host (network='host'), or set {NETWORK_ENV}=host "
        f"for commands that launch themselves. Received: {e}") from e
  try:
    yield ["nsenter", f"--target={holder.pid}", "--user", "--net",
           "--preserve-credentials", "--"]
  finally:
    holder.stdin.close()
    try:
      holder.wait(timeout=5)
    except subprocess.TimeoutExpired:
      holder.kill()
      holder.wait()


def unavailable_reason() -> Optional[str]:
  """Why this machine cannot give local clusters a private network; None if it can.

  Starts a namespace holder and ends it at once: the real test, since whether
  user namespaces work depends on the kernel, sysctls and the container.
  """
  try:
    holder = _start_holder()
  except Unavailable as e:
    return str(e)
  holder.stdin.close()
  holder.wait(timeout=_START_SECONDS)
  return None


def _start_holder() -> subprocess.Popen:
  if not sys.platform.startswith("linux"):
    raise Unavailable(f"network namespaces are Linux-only. Received: platform {sys.platform}")
  missing = [tool for tool in ("unshare", "nsenter") if shutil.which(tool) is None]
  if missing:
    raise Unavailable(f"install util-linux for {missing}. Received: {missing} not on PATH")
  holder = subprocess.Popen(
      ["unshare", "--user", "--map-root-user", "--net", "--", sys.executable, "-c", _HOLDER],
      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      start_new_session=True)  # Ctrl-C goes to the launcher, which ends the holder.
  ready = _first_line(holder)
  if ready != "ready":
    holder.kill()
    _, err = holder.communicate()
    raise Unavailable("could not create a private network namespace (are unprivileged user "
                      "namespaces disabled? sysctl kernel.unprivileged_userns_clone). "
                      f"Received: {err.strip().splitlines()[-1:] or ready!r}")
  return holder


def _first_line(process: subprocess.Popen) -> str:
  import threading  # Reading a pipe has no timeout of its own.
  line = []
  reader = threading.Thread(target=lambda: line.append(process.stdout.readline()), daemon=True)
  reader.start()
  reader.join(_START_SECONDS)
  return line[0].strip() if line else ""
