"""A SavedModel served through TensorFlow's batching op, over HTTP on loopback.

TF Serving batches requests with TensorFlow's `BatchFunction` op (what
`tf.nondifferentiable_batch_function` builds): calls that arrive within
`batch_timeout_micros` of each other, up to `max_batch_size` rows, are
concatenated along the first axis, run as one call of the model, and split
back. This server puts that op between a small HTTP server and a SavedModel,
so that the batching trade-off can be measured where TF Serving cannot be
installed. It answers TF Serving's REST predict call,

    POST /v1/models/<name>:predict   {"instances": [[...], ...]}
    ->                               {"predictions": [[...], ...], "batch_rows": [...]}

(`batch_rows`: the rows of the batch that served each of the request's rows,
which TF Serving does not say), one handler thread per connection
(`ThreadingHTTPServer`), and listens on 127.0.0.1 only.

One process serves every `Batching` it is given, each as its own model name
(`served_name`), so a grid of settings is measured without restarting
TensorFlow. Started as `python -m tfdist.serving._batching_server SPEC.json`
(see `tfdist.serving.measure_serving`), it writes its port to the spec's
`ready_file` once every name has answered a first call.

Example (in one process):

    >>> fn = batched(tf.saved_model.load(path),
    ...              Batching(max_batch_size=32, batch_timeout_micros=2000))
    >>> server = make_server({"model": fn})   # 127.0.0.1, a free port
    >>> threading.Thread(target=server.serve_forever, daemon=True).start()
"""

import http.server
import itertools
import json
import os
import re
import sys
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tfdist.serving._serving import Batching

HOST = "127.0.0.1"  # Loopback only: nothing here authenticates a client.
_PATH = re.compile(r"/v1/models/([\w.@-]+):predict")
_scopes = itertools.count()  # One batcher per batched function: see `batched`.
# A request body's cap: larger ones get 413 unread, never a handler thread
# reading for them (a thousand 8x8 digit images are about 1.5 MB of JSON).
MAX_REQUEST_BYTES = 64 << 20


def batched(saved_model, batching: Batching) -> Callable:
  """A loaded SavedModel's `serving_default` (one input) behind TensorFlow's batching op.

  Returns a function of one input batch returning (the signature's first
  output, the rows of the batch each row was served in); concurrent calls
  from several threads are batched together. Each returned function has its
  own batcher (see the comment below), so several may serve side by side.

  Example (`tfdist.serving.batched`):

      >>> fn = serving.batched(tf.saved_model.load(path),
      ...                      serving.Batching(max_batch_size=8, batch_timeout_micros=2000))
      >>> outputs, batch_rows = fn(tf.zeros([1, 8, 8, 1]))   # from many threads at once
  """
  signature = saved_model.signatures["serving_default"]
  (input_name, spec), = signature.structured_input_signature[1].items()
  output_name = sorted(signature.structured_outputs)[0]
  # The op shares its batcher by name (`tf.nondifferentiable_batch_function`
  # names it "batch" in the current name scope): two batched functions under
  # one scope would batch together and run the first one's model.
  scope = f"batching_{next(_scopes)}"

  @tf.function(input_signature=[tf.TensorSpec(spec.shape, spec.dtype)])
  def serve(rows):
    with tf.name_scope(scope):
      @tf.nondifferentiable_batch_function(
          batching.num_batch_threads, batching.max_batch_size, batching.batch_timeout_micros,
          max_enqueued_batches=batching.max_enqueued_batches)
      def run(batch):
        size = tf.shape(batch)[0]
        return signature(**{input_name: batch})[output_name], tf.fill([size], size)
      return run(rows)

  input_spec = tf.TensorSpec(spec.shape, spec.dtype)

  def checked(rows):
    # An input the signature refuses is refused here: tf.function (TF 2.21) takes
    # its lock before binding the inputs and does not release it when binding
    # fails, so every later call from another thread would wait forever.
    rows = tf.convert_to_tensor(rows)
    if not input_spec.is_compatible_with(rows):
      raise ValueError(f"The model takes {input_spec.dtype.name} rows of shape "
                       f"{input_spec.shape}. Received: {rows.dtype.name} of shape {rows.shape}")
    return serve(rows)

  checked.saved_model = saved_model  # It owns the variables: they live as long as `checked`.
  checked.input_signature = serve.input_signature  # As a tf.function's: what it takes.
  return checked


class _Handler(http.server.BaseHTTPRequestHandler):
  protocol_version = "HTTP/1.1"  # Keep-alive: a client's requests share one connection.
  # The headers and the body go out in two writes: without TCP_NODELAY, Nagle's
  # algorithm holds the body until the client's delayed ACK, 40 ms later.
  disable_nagle_algorithm = True
  functions: Mapping[str, Callable] = {}
  dtypes: Mapping[str, np.dtype] = {}

  def do_POST(self):  # pylint: disable=invalid-name
    match = _PATH.fullmatch(self.path)
    header = self.headers.get("Content-Length", "0")
    try:
      length = int(header)
      if not 0 <= length <= MAX_REQUEST_BYTES:
        raise ValueError
    except ValueError:
      # The body is left unread: the next request would start inside it.
      self.close_connection = True
      if header.strip().isdigit():
        return self._reply(413, {"error": f"Content-Length must be at most MAX_REQUEST_BYTES "
                                          f"({MAX_REQUEST_BYTES}). Received: {header}"})
      return self._reply(400, {"error": "Content-Length must be a whole number of bytes. "
                                        f"Received: {header!r}"})
    body = self.rfile.read(length)
    if match is None or match.group(1) not in self.functions:
      return self._reply(404, {"error": f"no model at {self.path}; served: "
                                        f"{sorted(self.functions)}"})
    name = match.group(1)
    try:
      rows = np.asarray(json.loads(body)["instances"], dtype=self.dtypes[name])
      outputs, batch_rows = self.functions[name](tf.constant(rows))
    except (ValueError, KeyError, TypeError, tf.errors.InvalidArgumentError) as e:
      return self._reply(400, {"error": f"{type(e).__name__}: {e}".splitlines()[0]})
    except (tf.errors.UnavailableError, tf.errors.ResourceExhaustedError) as e:
      # The batch queue is full (max_enqueued_batches): TF Serving's answer, retry later.
      return self._reply(503, {"error": f"{type(e).__name__}: {e}".splitlines()[0]})
    except tf.errors.OpError as e:
      return self._reply(500, {"error": f"{type(e).__name__}: {e}".splitlines()[0]})
    self._reply(200, {"predictions": outputs.numpy().tolist(),
                      "batch_rows": batch_rows.numpy().tolist()})

  def _reply(self, code: int, payload: dict):
    data = json.dumps(payload).encode()
    self.send_response(code)
    self.send_header("Content-Type", "application/json")
    self.send_header("Content-Length", str(len(data)))
    self.end_headers()
    self.wfile.write(data)

  def log_message(self, format, *args):  # pylint: disable=redefined-builtin
    pass  # A line per request would cost more than the model.


def make_server(functions: Mapping[str, Callable], dtypes: Optional[Mapping] = None,
                port: int = 0) -> http.server.ThreadingHTTPServer:
  """An HTTP server on 127.0.0.1:`port` (0: a free one) calling `functions` by model name."""
  handler = type("Handler", (_Handler,), {
      "functions": dict(functions),
      "dtypes": {name: np.dtype((dtypes or {}).get(name, np.float32)) for name in functions}})
  server = http.server.ThreadingHTTPServer((HOST, port), handler)
  server.daemon_threads = True
  return server


def load(models: Mapping[str, str], settings: Sequence[Batching]) -> Tuple[Dict, Dict]:
  """Every SavedModel of `models` (name: path) behind every setting, by served name.

  Returns:
    (served name: batched function, served name: its input's numpy dtype).
  """
  functions, dtypes = {}, {}
  for model, path in models.items():
    saved_model = tf.saved_model.load(path)
    signature = saved_model.signatures["serving_default"]
    dtype = list(signature.structured_input_signature[1].values())[0].dtype
    for batching in settings:
      functions[batching.served_name(model)] = batched(saved_model, batching)
      dtypes[batching.served_name(model)] = dtype.as_numpy_dtype
  return functions, dtypes


def main(argv) -> int:
  """Serves the spec's models under its settings, writes its port to `ready_file`, serves on."""
  with open(argv[1]) as f:
    spec = json.load(f)
  settings = [Batching(**entry) for entry in spec["settings"]]
  functions, dtypes = load(spec["models"], settings)
  for name, fn in functions.items():  # Traced before the first measured request.
    shape = [1] + [d or 1 for d in fn.input_signature[0].shape[1:]]
    fn(tf.zeros(shape, fn.input_signature[0].dtype))
  server = make_server(functions, dtypes)
  ready = spec["ready_file"]
  with open(ready + ".tmp", "w") as f:
    json.dump({"port": server.server_address[1], "pid": os.getpid()}, f)
  os.rename(ready + ".tmp", ready)  # Whole or absent: the parent polls for it.
  server.serve_forever()
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
