"""Preflight: every task of the cluster is reachable, or a clear error in bounded time.

MultiWorkerMirroredStrategy waits forever for a worker that never started, with
no message at all: its constructor blocks until every task registers. So before
the strategy exists, tfdist connects to every other task's address and gives up
after `timeout` seconds (default 30, or `TFDIST_PREFLIGHT_TIMEOUT`), naming the
task, the address, the wait and what to check. This works the same for jobs
started by hand with TF_CONFIG.

For peers to find each other before any TF server exists, each task holds a
plain TCP listener on its own port while it waits (`rendezvous`), then frees the
port for TensorFlow's server. A peer that already got further answers on the
same port with its real server.

Example:

    >>> spec = ClusterSpec.from_env()
    >>> wait_for_tasks(spec, timeout=30)   # raises TaskUnreachableError
"""

import errno
import os
import selectors
import socket
import struct
import threading
import time
from typing import Dict, Iterable, List, Mapping, Optional, Set, Tuple

from tfdist import _variables as variables
from tfdist.cluster import _grace as grace
from tfdist.cluster import _spec as spec_lib

TIMEOUT_ENV = variables.PREFLIGHT_TIMEOUT
DEFAULT_TIMEOUT = 30.0
_RETRY_SECONDS = 0.25
_LINGER_SECONDS = 4 * _RETRY_SECONDS
# How long one sweep waits for connections to complete; every pending address is
# probed at once, so a sweep costs this at most whatever the cluster's size.
_PROBE_SECONDS = 1.0
_MAX_RETRY_SECONDS = 1.0


class TaskUnreachableError(RuntimeError):
  """A task of the cluster did not accept connections within the preflight timeout."""


def preflight_timeout(timeout: Optional[float] = None,
                      environ: Optional[Mapping[str, str]] = None) -> float:
  """The timeout: explicit argument, else `TFDIST_PREFLIGHT_TIMEOUT`, else 30 s.

  Raises:
    ValueError: the value is not a positive number.
  """
  environ = os.environ if environ is None else environ
  source = "timeout"
  if timeout is None and TIMEOUT_ENV in environ:
    source, timeout = TIMEOUT_ENV, environ[TIMEOUT_ENV]
  if timeout is None:
    return DEFAULT_TIMEOUT
  return grace.positive_seconds(timeout, source)


def reachable(address: str, timeout: float = 1.0) -> bool:
  """Whether something accepts TCP connections at "host:port" right now (see `probe`)."""
  return address in probe([address], timeout)


def resolve(address: str) -> List[Tuple[int, tuple]]:
  """(family, socket address) for every address of "host:port"'s host; [] if unknown.

  Every one, as `socket.create_connection` tries them: "localhost" may be ::1
  first while the task listens on 127.0.0.1 only.
  """
  host, port = spec_lib.split_address(address)
  try:
    infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
  except OSError:  # Unknown host: unreachable for now (DNS may catch up).
    return []
  return [(family, sockaddr) for family, _, _, _, sockaddr in infos]


def _close(sock: socket.socket) -> None:
  # Reset, not FIN: a probe leaves no TIME_WAIT behind. A cluster's tasks probe
  # each other every quarter second, and 128 tasks on one host would otherwise
  # hold tens of thousands of ephemeral ports for a minute, enough to run out.
  try:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
  except OSError:
    pass
  sock.close()


def probe(addresses: Iterable[str], timeout: float = _PROBE_SECONDS, *,
          resolved: Optional[Dict[str, List[Tuple[int, tuple]]]] = None) -> Set[str]:
  """The addresses that accept a TCP connection, all tried at once within `timeout` seconds.

  `resolved` caches `resolve`'s answers across calls (names that did not
  resolve are tried again).
  """
  resolved = {} if resolved is None else resolved
  pending: Dict[socket.socket, str] = {}
  answered: Set[str] = set()
  with selectors.DefaultSelector() as selector:
    for address in set(addresses):
      if not resolved.get(address):
        resolved[address] = resolve(address)
      for family, sockaddr in resolved[address]:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        code = sock.connect_ex(sockaddr)
        if code == 0:
          answered.add(address)
          _close(sock)
        elif code in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
          pending[sock] = address
          selector.register(sock, selectors.EVENT_WRITE)
        else:
          _close(sock)
    deadline = time.monotonic() + timeout
    while pending:
      remaining = deadline - time.monotonic()
      # One last look with no wait after the deadline: a busy process may come
      # back late, and connections that completed meanwhile count.
      for key, _ in selector.select(timeout=max(0.0, remaining)):
        sock = key.fileobj
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
          answered.add(pending[sock])
        selector.unregister(sock)
        _close(sock)
        del pending[sock]
      if remaining <= 0:
        break
    for sock in pending:
      _close(sock)
  return answered


def wait_for_tasks(spec: spec_lib.ClusterSpec, *, timeout: Optional[float] = None,
                   tasks: Optional[Iterable[spec_lib.TaskSpec]] = None) -> float:
  """Waits until every task (default: all but `spec.task`) accepts connections.

  Every pending task is probed at once in each sweep, so a cluster of hundreds
  of tasks takes no longer than one of two, and the error comes within about a
  second of the deadline however many tasks are missing.

  Args:
    spec: the cluster.
    timeout: seconds to wait in all (see `preflight_timeout`).
    tasks: which tasks to wait for; the evaluator is never waited for.

  Returns:
    Seconds waited.

  Raises:
    TaskUnreachableError: a task was still unreachable at the deadline.
  """
  timeout = preflight_timeout(timeout)
  if tasks is None:
    tasks = [t for t in spec.tasks() if t != spec.task]
  pending = {t: spec.address(t) for t in tasks if t.type != spec_lib.EVALUATOR}
  start = time.monotonic()
  deadline = start + timeout
  resolved: Dict[str, List[Tuple[int, tuple]]] = {}
  retry = _RETRY_SECONDS / 1.5
  while pending:
    answered = probe(pending.values(), resolved=resolved,
                     timeout=min(_PROBE_SECONDS, max(_RETRY_SECONDS, deadline - time.monotonic())))
    pending = {t: a for t, a in pending.items() if a not in answered}
    if not pending:
      break
    waited = time.monotonic() - start
    if waited >= timeout:
      task, address = next(iter(pending.items()))
      others = [str(t) for t in pending][1:]
      raise TaskUnreachableError(
          f"Task {task} at {address} did not answer within {waited:.0f}s"
          + (f" (nor did {others})" if others else "") + ". Check that it was "
          "started, that it did not crash (see its log), that the address in "
          "TF_CONFIG is right, and that no firewall blocks the port; set "
          f"{TIMEOUT_ENV} to wait longer. Received: cluster={spec.as_dict()}, "
          f"this task={spec.task}")
    # Back off to a second between sweeps: a large cluster starting up probes
    # itself N^2 times per sweep, and the tasks still starting need the CPU.
    retry = min(_MAX_RETRY_SECONDS, retry * 1.5)
    time.sleep(min(retry, max(0.0, deadline - time.monotonic())))
  return time.monotonic() - start


def rendezvous(spec: spec_lib.ClusterSpec, *, timeout: Optional[float] = None) -> float:
  """Listens on this task's port while waiting for every other task; see module doc.

  Raises:
    RuntimeError: this task's own port is taken by another process.
    TaskUnreachableError: another task did not answer in time.
  """
  timeout = preflight_timeout(timeout)
  own = spec.address(spec.task) if spec.task is not None else None
  if own is None:
    return wait_for_tasks(spec, timeout=timeout)
  host, port = spec_lib.split_address(own)
  family = socket.AF_INET6 if ":" in host else socket.AF_INET
  listener = socket.socket(family, socket.SOCK_STREAM)
  listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  try:
    # Bind where TF will listen: "localhost" stays on loopback.
    listener.bind(("" if host not in spec_lib.LOOPBACK_HOSTS else host, int(port)))
  except OSError as e:
    listener.close()
    raise RuntimeError(
        f"This task's port is already in use, so TensorFlow could not serve {spec.task} "
        f"there: another job or a leftover process holds it. Stop it, or give this task "
        f"another port in the cluster spec. Received: {own} ({e.strerror})") from e
  # Peers' probes are accepted and closed at once: a listener that never accepts
  # fills its backlog, and past it healthy peers would look unreachable.
  stop = threading.Event()
  acceptor = threading.Thread(target=_accept_until, args=(listener, stop), daemon=True)
  try:
    listener.listen(socket.SOMAXCONN)
    acceptor.start()
    waited = wait_for_tasks(spec, timeout=timeout)
    # Stay visible a little longer: a peer may be between two probes and would
    # otherwise look for us in the gap before TensorFlow's server takes the port.
    time.sleep(_LINGER_SECONDS)
    return waited
  finally:
    stop.set()
    if acceptor.is_alive():
      acceptor.join(timeout=2 * _RETRY_SECONDS)
    listener.close()


def _accept_until(listener: socket.socket, stop: threading.Event) -> None:
  listener.settimeout(_RETRY_SECONDS)
  while not stop.is_set():
    try:
      connection, _ = listener.accept()
    except socket.timeout:
      continue
    except OSError:  # Closed under us.
      return
    connection.close()
