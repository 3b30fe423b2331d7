"""A bounded load generator: concurrent clients, latency percentiles and throughput.

Each client is a thread with one keep-alive HTTP connection that sends its
next request as soon as the last one is answered (a closed loop, like the
client threads TF Serving's batching guide sizes its batches for). The run is
bounded twice: by a number of requests and by a time, and every request has
its own timeout, so a server that stops answering ends the run with errors
counted, never a hang.

Example:

    >>> load = run_load([8501], "/v1/models/model:predict", [body], clients=16,
    ...                 requests=400, duration=20)
    >>> load.p99_ms, load.requests_per_second
"""

import dataclasses
import http.client
import json
import math
import statistics
import threading
import time
from typing import List, Optional, Sequence

import numpy as np

HOST = "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class Load:
  """What one run of the load generator measured (client side).

  Attributes:
    requests: requests answered with 200 (warm-up excluded).
    errors: requests refused, failed or timed out.
    seconds: from the first measured request sent to the last answered.
    p50_ms, p99_ms: request latency percentiles.
    requests_per_second, rows_per_second: throughput.
    mean_batch_rows: the mean size of the batches that served the requests;
      NaN when the server does not say (TF Serving sends no `batch_rows`).
  """
  requests: int
  errors: int
  seconds: float
  p50_ms: float
  p99_ms: float
  requests_per_second: float
  rows_per_second: float
  mean_batch_rows: float


def post(port: int, path: str, body: bytes, *, timeout: float = 10.0) -> dict:
  """One POST of `body` to 127.0.0.1:`port``path`; the JSON answer.

  Raises:
    RuntimeError: the server answered with a status other than 200.
  """
  connection = http.client.HTTPConnection(HOST, port, timeout=timeout)
  try:
    connection.request("POST", path, body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    payload = response.read()
  finally:
    connection.close()
  if response.status != 200:
    raise RuntimeError(f"{path} answered {response.status}: {payload[:300]!r}")
  return json.loads(payload)


def run_load(ports: Sequence[int], path: str, bodies: Sequence[bytes], *, clients: int,
             requests: int, duration: float, timeout: float = 10.0, warmup: int = 2) -> Load:
  """Sends `requests` POSTs to `path` from `clients` threads, within `duration` seconds.

  Client i talks to 127.0.0.1:ports[i % len(ports)] (one server process per
  port: the load is spread evenly), sending `bodies` in turn from its own
  offset; its first `warmup` requests are not counted. The run ends after
  `requests` measured requests or `duration` seconds, whichever comes first;
  a request gets `timeout` seconds.

  Returns:
    A `Load`; with no request answered its latencies are NaN.
  """
  if clients < 1 or requests < 1 or duration <= 0 or not ports or not bodies:
    raise ValueError("run_load needs clients >= 1, requests >= 1, duration > 0, a port and a "
                     f"body. Received: clients={clients}, requests={requests}, "
                     f"duration={duration}, ports={list(ports)}, {len(bodies)} bodies")
  lock = threading.Lock()
  deadline = time.monotonic() + duration
  state = {"left": requests, "errors": 0, "first": None, "last": None}
  answers: List[tuple] = []  # (latency, payload): decoded after the run, not in the loop.

  def client(index: int):
    port = ports[index % len(ports)]
    connection = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
      for sent in range(2 ** 62):
        if time.monotonic() > deadline:
          return
        counted = sent >= warmup
        if counted:
          with lock:
            if state["left"] <= 0:
              return
            state["left"] -= 1
        body = bodies[(index + sent) % len(bodies)]
        began = time.perf_counter()
        try:
          connection.request("POST", path, body, {"Content-Type": "application/json"})
          response = connection.getresponse()
          payload, ok = response.read(), response.status == 200
        except (OSError, http.client.HTTPException):
          payload, ok = b"", False
          connection.close()  # Reconnects on the next request.
        ended = time.perf_counter()
        if counted:
          with lock:
            if ok:
              answers.append((ended - began, payload))
              state["first"] = began if state["first"] is None else min(state["first"], began)
              state["last"] = ended if state["last"] is None else max(state["last"], ended)
            else:
              state["errors"] += 1
    finally:
      connection.close()

  threads = [threading.Thread(target=client, args=(i,), daemon=True, name=f"load-client-{i}")
             for i in range(clients)]
  for thread in threads:
    thread.start()
  for thread in threads:  # Each request ends within its timeout: the join is bounded.
    thread.join(max(0.0, deadline - time.monotonic()) + timeout + 1)
  with lock:  # A client still stuck past its timeout is left behind (daemon), uncounted.
    done, errors = list(answers), state["errors"]
    first, last = state["first"], state["last"]
  if not done:
    nan = float("nan")
    return Load(0, errors, 0.0, nan, nan, 0.0, 0.0, nan)
  latencies = np.asarray([latency for latency, _ in done])
  rows, batch_rows = 0, []
  for _, payload in done:
    answer = json.loads(payload)
    rows += len(answer.get("predictions", ()))  # One per row, in TF Serving's row format.
    if answer.get("batch_rows"):  # Only tfdist's batching server says.
      batch_rows.append(statistics.fmean(answer["batch_rows"]))
  seconds = max(last - first, 1e-9)
  return Load(requests=len(done), errors=errors, seconds=seconds,
              p50_ms=1000 * float(np.percentile(latencies, 50)),
              p99_ms=1000 * float(np.percentile(latencies, 99)),
              requests_per_second=len(done) / seconds, rows_per_second=rows / seconds,
              mean_batch_rows=statistics.fmean(batch_rows) if batch_rows else float("nan"))


def is_measured(load: Optional[Load]) -> bool:
  """Whether `load` answered every request it sent (no errors) and measured a latency."""
  return load is not None and load.requests > 0 and load.errors == 0 and \
      not math.isnan(load.p99_ms)
