"""tfdist/serving/_load_generator.py: concurrent clients, bounded by requests, time and timeouts."""

import http.server
import json
import math
import socket
import threading

import pytest

from tfdist import serving


class _Answer(http.server.BaseHTTPRequestHandler):
  protocol_version = "HTTP/1.1"

  def do_POST(self):  # pylint: disable=invalid-name
    self.rfile.read(int(self.headers["Content-Length"]))
    data = json.dumps({"predictions": [[0.0]], "batch_rows": [3]}).encode()
    self.send_response(200)
    self.send_header("Content-Length", str(len(data)))
    self.end_headers()
    self.wfile.write(data)

  def log_message(self, *args):
    pass


class _TFServingAnswer(_Answer):
  """Answers as TF Serving does: predictions only, one per row, no batch sizes."""

  def do_POST(self):  # pylint: disable=invalid-name
    self.rfile.read(int(self.headers["Content-Length"]))
    data = json.dumps({"predictions": [[0.0], [1.0]]}).encode()
    self.send_response(200)
    self.send_header("Content-Length", str(len(data)))
    self.end_headers()
    self.wfile.write(data)


def _serve(handler):
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
  server.daemon_threads = True
  threading.Thread(target=server.serve_forever, daemon=True).start()
  return server


@pytest.fixture
def answering_port():
  server = _serve(_Answer)
  yield server.server_address[1]
  server.shutdown()
  server.server_close()


def test_sends_exactly_the_requests_asked_for(answering_port):
  load = serving.run_load([answering_port], "/v1/models/m:predict", [b"{}"], clients=4,
                          requests=50, duration=30)
  assert (load.requests, load.errors) == (50, 0)
  assert 0 < load.p50_ms <= load.p99_ms
  assert load.mean_batch_rows == 3
  assert load.rows_per_second == pytest.approx(load.requests_per_second)


def test_measures_tf_serving_which_does_not_say_its_batch_sizes():
  server = _serve(_TFServingAnswer)
  try:
    load = serving.run_load([server.server_address[1]], "/v1/models/m:predict", [b"{}"],
                            clients=2, requests=10, duration=30)
  finally:
    server.shutdown()
    server.server_close()
  assert (load.requests, load.errors) == (10, 0)
  assert math.isnan(load.mean_batch_rows)  # Unknown, not a guess.
  assert load.rows_per_second == pytest.approx(2 * load.requests_per_second)


def test_a_server_that_never_answers_ends_the_run_within_its_bounds():
  silent = socket.create_server(("127.0.0.1", 0))  # Accepts (the kernel does), never answers.
  result = []
  try:
    run = threading.Thread(target=lambda: result.append(serving.run_load(
        [silent.getsockname()[1]], "/", [b"{}"], clients=3, requests=1000, duration=1.0,
        timeout=0.5, warmup=0)), daemon=True)
    run.start()
    run.join(60)  # It ends after about 1.5 s; a hang would outlive any bound.
  finally:
    silent.close()
  assert not run.is_alive()
  (load,) = result
  assert load.requests == 0 and load.errors >= 3


def test_refuses_a_load_of_nothing():
  with pytest.raises(ValueError, match=r"clients >= 1.*Received: clients=0"):
    serving.run_load([1], "/", [b"{}"], clients=0, requests=1, duration=1)
