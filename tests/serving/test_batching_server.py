"""tfdist/serving/_batching_server.py: a SavedModel behind TensorFlow's batching op, over HTTP."""

import concurrent.futures
import json
import socket
import threading

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import tfdist
from tfdist import serving
from tfdist.serving import _batching_server as batching_server
from tfdist.serving import _load_generator as load_generator


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  """A Dense model exported with tfdist.export and the trivial model, each batched twice.

  Yields (port, the model's own signature); the server stops afterwards.
  """
  folder = tmp_path_factory.mktemp("served")
  model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(3)])
  path = tfdist.export(model, str(folder / "model"))
  trivial = serving.write_trivial_model(str(folder / "trivial" / "1"), like=path)
  # A window of 2 s: requests sent together are served as one batch.
  settings = [serving.Batching(max_batch_size=16, batch_timeout_micros=2_000_000),
              serving.Batching(max_batch_size=16, batch_timeout_micros=0)]
  functions, dtypes = batching_server.load({"model": path, "trivial": trivial}, settings)
  server = batching_server.make_server(functions, dtypes)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  yield server, tf.saved_model.load(path).signatures["serving_default"]
  server.shutdown()
  server.server_close()


def _post(port, name, rows):
  body = json.dumps({"instances": rows.tolist()}).encode()
  return load_generator.post(port, f"/v1/models/{name}:predict", body, timeout=30)


@pytest.mark.slow
def test_requests_of_different_sizes_batched_together_get_their_own_outputs(served):
  server, signature = served
  port = server.server_address[1]
  rng = np.random.default_rng(0)
  # Requests of 1, 2 and 3 rows to the model and to the trivial model at once:
  # two batched functions in one process, each with its own batcher.
  requests = [("model@16x2000000", rng.random((n, 4)).astype(np.float32)) for n in (1, 2, 3)]
  requests += [("trivial@16x2000000", rng.random((n, 4)).astype(np.float32)) for n in (2, 3)]
  with concurrent.futures.ThreadPoolExecutor(len(requests)) as pool:
    answers = list(pool.map(lambda r: _post(port, *r), requests))
  for (name, rows), answer in zip(requests, answers):
    predictions = np.asarray(answer["predictions"])
    if name.startswith("trivial"):
      np.testing.assert_array_equal(predictions, rows)
      assert answer["batch_rows"] == [5] * len(rows)  # 2 + 3 rows, one batch.
    else:
      (expected,) = signature(tf.constant(rows)).values()
      np.testing.assert_allclose(predictions, expected.numpy(), rtol=1e-6, atol=1e-6)
      assert answer["batch_rows"] == [6] * len(rows)  # 1 + 2 + 3 rows, one batch.


def test_listens_on_loopback_only_and_names_what_it_serves(served):
  server, _ = served
  assert server.server_address[0] == "127.0.0.1"
  try:
    outside = [a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
               if not a[4][0].startswith("127.")]
  except socket.gaierror:
    outside = []
  for address in outside[:1]:  # Where the machine has another interface, nothing answers there.
    with pytest.raises(OSError):
      socket.create_connection((address, server.server_address[1]), timeout=2).close()
  port = server.server_address[1]
  with pytest.raises(RuntimeError, match=r"answered 404.*model@16x0"):
    _post(port, "nothing@1x0", np.zeros((1, 4), np.float32))
  with pytest.raises(RuntimeError, match=r"answered 400.*takes float32 rows of shape \(None, 4\)"):
    _post(port, "model@16x0", np.zeros((1, 5), np.float32))  # The model takes 4 columns.
  # Each request comes on a new connection, served by a new thread: a refused
  # input must not leave the function's lock held (it would wait forever).
  for _ in range(3):
    assert _post(port, "model@16x0", np.ones((1, 4), np.float32))["batch_rows"] == [1]


@pytest.mark.slow
def test_batched_is_public_and_batches_calls_from_threads(tmp_path):
  model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(3)])
  saved_model = tf.saved_model.load(tfdist.export(model, str(tmp_path / "model")))
  # A window of 2 s: calls made together from threads run as one batch.
  fn = serving.batched(saved_model, serving.Batching(max_batch_size=16,
                                                     batch_timeout_micros=2_000_000))
  rng = np.random.default_rng(0)
  calls = [rng.random((n, 4)).astype(np.float32) for n in (1, 2, 3)]
  with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
    answers = list(pool.map(lambda rows: fn(tf.constant(rows)), calls))
  signature = saved_model.signatures["serving_default"]
  for rows, (outputs, batch_rows) in zip(calls, answers):
    (expected,) = signature(tf.constant(rows)).values()
    np.testing.assert_allclose(outputs.numpy(), expected.numpy(), rtol=1e-6, atol=1e-6)
    assert batch_rows.numpy().tolist() == [6] * len(rows)  # 1 + 2 + 3 rows, one batch.


def _status(port, content_length: str) -> tuple:
  """A predict request's status and JSON answer, with `content_length` as its header, no body."""
  with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
    connection.sendall(f"POST /v1/models/model@16x0:predict HTTP/1.1\r\nHost: test\r\n"
                       f"Content-Length: {content_length}\r\n\r\n".encode())
    answer = b""
    while chunk := connection.recv(65536):  # The server closes: nothing more comes.
      answer += chunk
  head, _, body = answer.partition(b"\r\n\r\n")
  return int(head.split()[1]), json.loads(body)


def test_a_bad_content_length_gets_400_or_413_and_the_server_answers_on():
  # The header is read before any model runs: a model of numpy's own serves here.
  def model(rows):
    return tf.constant(rows.numpy() * 2), tf.fill([rows.shape[0]], rows.shape[0])

  server = batching_server.make_server({"model@16x0": model})
  threading.Thread(target=server.serve_forever, daemon=True).start()
  try:
    port = server.server_address[1]
    assert _status(port, "many") == (400, {"error": "Content-Length must be a whole number of "
                                                    "bytes. Received: 'many'"})
    assert _status(port, "-1")[0] == 400  # read(-1) would wait for the client to close.
    code, answer = _status(port, str(batching_server.MAX_REQUEST_BYTES + 1))
    assert code == 413 and str(batching_server.MAX_REQUEST_BYTES) in answer["error"]
    answer = _post(port, "model@16x0", np.ones((1, 4), np.float32))
    assert answer == {"predictions": [[2.0] * 4], "batch_rows": [1]}
  finally:
    server.shutdown()
    server.server_close()


def test_a_full_batch_queue_answers_503_and_other_tensorflow_errors_500():
  def full(rows):  # What the batching op raises past max_enqueued_batches.
    raise tf.errors.UnavailableError(None, None, "The batch scheduling queue to which this "
                                     "task was submitted is full")

  def broken(rows):
    raise tf.errors.InternalError(None, None, "something broke\nand more")

  server = batching_server.make_server({"full": full, "broken": broken})
  threading.Thread(target=server.serve_forever, daemon=True).start()
  try:
    port = server.server_address[1]
    with pytest.raises(RuntimeError, match=r"answered 503.*UnavailableError: The batch sch"):
      _post(port, "full", np.ones((1, 4), np.float32))
    with pytest.raises(RuntimeError, match=r"answered 500.*InternalError: something broke\""):
      _post(port, "broken", np.ones((1, 4), np.float32))
  finally:
    server.shutdown()
    server.server_close()
