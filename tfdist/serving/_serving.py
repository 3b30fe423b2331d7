"""Serving with request batching, measured: the trade-off, and TF Serving's batching file.

TF Serving batches requests with TensorFlow's `BatchFunction` op: requests
that arrive within `batch_timeout_micros` of the first, up to
`max_batch_size` rows, run as one call of the model. A longer window makes
larger batches (fewer calls, more requests served per second when the server
is busy) and makes a request wait longer when it is not. `measure_serving`
serves a SavedModel (`tfdist.export`'s) through that op behind a small HTTP
server on 127.0.0.1, in one and in several processes (Python's GIL keeps one
process's request handling on one core), and drives it with concurrent
clients for every setting of a grid; `choose_batching` picks the setting with
the highest throughput whose p99 latency meets a target, and
`batching_parameters_text` writes it as TF Serving's `--batching_parameters_file`.

Serve a trivial model the same way (`write_trivial_model`: it returns its
input) to see what the HTTP and JSON round trip costs without the model.

Example:

    >>> path = tfdist.export(model, "models/digits/1")
    >>> rows = measure_serving({"model": path}, [Batching(8, 0), Batching(32, 2000)])
    >>> table = serving_table(rows)   # A text table: one line per cell, p50, p99, requests/s.
    >>> best = choose_batching(rows, latency_target_ms=50)
    >>> open("batching.txt", "w").write(batching_parameters_text(best.batching))
"""

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, Iterator, List, Mapping, Optional, Sequence

import numpy as np

from tfdist.serving import _load_generator as load_generator
from tfdist.launch import _supervision as supervision

TRIVIAL = "trivial"  # The served name of `write_trivial_model`'s model in `measure_serving`.


@dataclasses.dataclass(frozen=True)
class Batching:
  """TF Serving's batching parameters: its `batching_parameters` file, the op's arguments.

  Attributes:
    max_batch_size: the most rows one batch holds.
    batch_timeout_micros: how long a batch's first request waits for more.
    num_batch_threads: batches run at once (in each server process).
    max_enqueued_batches: batches that may wait; a request beyond them is refused.

  Example:

    >>> Batching(max_batch_size=32, batch_timeout_micros=2000).served_name("model")
    'model@32x2000'
  """
  max_batch_size: int = 32
  batch_timeout_micros: int = 1000
  num_batch_threads: int = 1
  max_enqueued_batches: int = 100

  def __post_init__(self):
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      low = 0 if field.name == "batch_timeout_micros" else 1
      if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"`{field.name}` must be an integer >= {low}. Received: "
                         f"{field.name}={value!r}")

  def served_name(self, model: str) -> str:
    """The name `model` is served under with these parameters, e.g. 'model@32x2000'."""
    return f"{model}@{self.max_batch_size}x{self.batch_timeout_micros}"


@dataclasses.dataclass(frozen=True)
class ServingMeasurement:
  """One cell of the grid: a model, a batching setting, a number of server processes.

  Attributes:
    model: the served model's name (`measure_serving`'s key; `TRIVIAL` for the trivial one).
    batching: the setting.
    processes: server processes the clients were spread over.
    clients: concurrent clients.
    load: what the load generator measured (`p50_ms`, `p99_ms`,
      `requests_per_second`, `mean_batch_rows`, `errors`, ...).
  """
  model: str
  batching: Batching
  processes: int
  clients: int
  load: load_generator.Load


def batching_parameters_text(batching: Batching) -> str:
  """`batching` as TF Serving's `--batching_parameters_file` (a `BatchingParameters` text proto).

  Each field is a `google.protobuf.Int64Value`, hence `{ value: ... }`
  (tensorflow_serving/servables/tensorflow/session_bundle_config.proto).
  """
  return "".join(f"{name} {{ value: {getattr(batching, name)} }}\n"
                 for name in ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches",
                              "num_batch_threads"))


def write_trivial_model(export_dir: str, like: str) -> str:
  """Writes a SavedModel that returns its input, with `like`'s input, to `export_dir`.

  Served the same way as the model at `like`, it measures everything but the
  model: HTTP, JSON, the batching op. Returns `export_dir`.
  """
  import tensorflow as tf  # Not at the top: importing tfdist.serving loads no TensorFlow.
  signature = tf.saved_model.load(like).signatures["serving_default"]
  (name, spec), = signature.structured_input_signature[1].items()

  class Identity(tf.Module):

    @tf.function(input_signature=[tf.TensorSpec(spec.shape, spec.dtype, name=name)])
    def serve(self, rows):
      return {"output_0": tf.identity(rows)}

  module = Identity()
  tf.saved_model.save(module, export_dir, signatures={"serving_default": module.serve})
  return export_dir


@contextlib.contextmanager
def start_servers(models: Mapping[str, str], settings: Sequence[Batching], processes: int, *,
                  timeout: float = 180.0) -> Iterator[List[int]]:
  """`processes` batching servers, each serving every model under every setting; yields
  their ports, then stops them.

  Each runs in its own process group, killed (SIGKILL) on the way out, so
  nothing it started outlives the measurement; and each dies with the
  calling process (prctl's parent-death signal), however that dies (SIGKILL,
  a killed notebook kernel), since no way out of this block runs then. Call
  it from a thread that outlives the block: the signal follows that thread.

  Raises:
    RuntimeError: a server died or was not ready within `timeout` seconds.
  """
  folder = tempfile.mkdtemp(prefix="tfdist-serving-")  # 0700: the spec and the ports.
  started = []
  try:
    spec = {"models": dict(models), "settings": [dataclasses.asdict(s) for s in settings]}
    for index in range(processes):
      path = os.path.join(folder, f"server-{index}")
      with open(path + ".json", "w") as f:
        json.dump({**spec, "ready_file": path + ".ready"}, f)
      with open(path + ".log", "w") as log:
        started.append((subprocess.Popen(
            [sys.executable, "-m", "tfdist.serving._batching_server", path + ".json"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=supervision.die_with_parent(os.getpid())), path))
    ports = []
    deadline = time.monotonic() + timeout
    for process, path in started:
      while not os.path.exists(path + ".ready"):
        if process.poll() is not None or time.monotonic() > deadline:
          with open(path + ".log") as log:
            tail = log.read()[-2000:]
          state = (f"exited with {process.returncode}" if process.poll() is not None
                   else f"not ready after {timeout:g} s")
          raise RuntimeError(f"A batching server {state}; its output ends:\n{tail}")
        time.sleep(0.1)
      with open(path + ".ready") as f:
        ports.append(json.load(f)["port"])
    yield ports
  finally:
    for process, _ in started:
      with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    for process, _ in started:
      process.wait(timeout=30)
    shutil.rmtree(folder, ignore_errors=True)


def request_bodies(input_shape: Sequence[int], rows: Sequence[int], *, count: int = 16,
                   seed: int = 0) -> List[bytes]:
  """`count` TF Serving REST predict bodies of random rows, of sizes cycling through `rows`."""
  rng = np.random.default_rng(seed)
  return [json.dumps({"instances": rng.random(
      [rows[i % len(rows)]] + list(input_shape)).astype(np.float32).tolist()}).encode()
          for i in range(count)]


def _input_shape(path: str) -> List[int]:
  """The shape of one row of the SavedModel's `serving_default` input."""
  import tensorflow as tf
  signature = tf.saved_model.load(path).signatures["serving_default"]
  (spec,) = signature.structured_input_signature[1].values()
  return [int(d) for d in spec.shape[1:]]


def measure_serving(models: Mapping[str, str], settings: Sequence[Batching], *,
                    processes: Sequence[int] = (1, 2), clients: Sequence[int] = (16,),
                    requests: int = 400,
                    rows_per_request: Sequence[int] = (1,), duration: float = 30.0,
                    trivial: bool = True, timeout: float = 10.0) -> List[ServingMeasurement]:
  """Every model under every setting and number of server processes, under concurrent clients.

  The servers start once (as many as the largest of `processes`; a run with
  fewer uses the first ones) and serve every (model, setting) pair; each cell
  then gets each number of `clients` (closed-loop) for `requests` requests or
  `duration` seconds, interleaved: setting by setting, each process count,
  load and model in turn, so the machine's noise hits them alike.

  Args:
    models: name -> a SavedModel version folder (`tfdist.export`'s return).
    settings: the batching settings to measure.
    processes: the numbers of server processes to measure.
    clients: the numbers of concurrent clients (a light and a heavy load, say).
    requests: the measured requests of each cell's run (`run_load`).
    duration: the most seconds each cell's run takes.
    rows_per_request: request sizes, in turn (mixed sizes batch together).
    trivial: also serve `write_trivial_model` of the first model, as `TRIVIAL`.
    timeout: seconds per request.

  Returns:
    One `ServingMeasurement` per model (and `TRIVIAL`), setting, process
    count and number of clients.
  """
  if not models or not settings or not processes or min(processes) < 1 or not clients \
      or min(clients) < 1:
    raise ValueError("measure_serving needs a model, a setting, and process and client counts "
                     f">= 1. Received: models={dict(models)}, {len(settings)} settings, "
                     f"processes={list(processes)}, clients={list(clients)}")
  if len({s.served_name("") for s in settings}) < len(settings):
    raise ValueError("`settings` repeat a (max_batch_size, batch_timeout_micros) pair; each "
                     f"is served under one name. Received: {list(settings)}")
  models = dict(models)
  scratch = tempfile.mkdtemp(prefix="tfdist-trivial-")
  try:
    if trivial:
      models[TRIVIAL] = write_trivial_model(os.path.join(scratch, "1"),
                                            like=next(iter(models.values())))
    bodies = {name: request_bodies(_input_shape(path), rows_per_request)
              for name, path in models.items()}
    rows: List[ServingMeasurement] = []
    with start_servers(models, settings, max(processes)) as ports:
      for batching in settings:
        for count in processes:
          for concurrent in clients:
            for name in models:
              load = load_generator.run_load(
                  ports[:count], f"/v1/models/{batching.served_name(name)}:predict",
                  bodies[name], clients=concurrent, requests=requests, duration=duration,
                  timeout=timeout)
              rows.append(ServingMeasurement(name, batching, count, concurrent, load))
    return rows
  finally:
    shutil.rmtree(scratch, ignore_errors=True)


def choose_batching(measurements: Sequence[ServingMeasurement], latency_target_ms: float, *,
                    model: Optional[str] = None,
                    clients: Optional[int] = None) -> ServingMeasurement:
  """The measured cell with the most requests per second whose p99 latency meets the target.

  Only cells under the load the target is meant for (`clients`) compete;
  cells with an error (a refused or timed-out request) never qualify.

  Args:
    measurements: `measure_serving`'s rows.
    latency_target_ms: the p99 latency to meet, in milliseconds.
    model: the model to choose for; default: the first one measured that is
      not the trivial model.
    clients: the load to choose for; default: the largest number of clients measured.

  Raises:
    ValueError: the target is not positive, or no cell met it (the message
      names the best p99 measured).
  """
  if not latency_target_ms > 0:
    raise ValueError(f"`latency_target_ms` must be > 0. Received: "
                     f"latency_target_ms={latency_target_ms!r}")
  if model is None:
    model = next((m.model for m in measurements if m.model != TRIVIAL), None)
  if clients is None:
    clients = max((m.clients for m in measurements), default=None)
  cells = [m for m in measurements if m.model == model and m.clients == clients
           and load_generator.is_measured(m.load)]
  if not cells:
    raise ValueError(f"No measurement of model {model!r} under {clients} clients answered all "
                     "its requests. "
                     f"Received: {len(measurements)} measurements of "
                     f"{sorted({m.model for m in measurements})}")
  meeting = [m for m in cells if m.load.p99_ms <= latency_target_ms]
  if not meeting:
    best = min(cells, key=lambda m: m.load.p99_ms)
    raise ValueError(
        f"No batching setting met `latency_target_ms`={latency_target_ms:g}: the best p99 "
        f"measured was {best.load.p99_ms:.2f} ms ({_describe(best)}). Raise the target, or "
        "measure shorter windows, smaller batches or more server processes. Received: "
        f"latency_target_ms={latency_target_ms:g}")
  return max(meeting, key=lambda m: m.load.requests_per_second)


def _describe(row: ServingMeasurement) -> str:
  return (f"max_batch_size={row.batching.max_batch_size}, "
          f"batch_timeout_micros={row.batching.batch_timeout_micros}, "
          f"{row.processes} process{'es' if row.processes > 1 else ''}, {row.clients} clients")


def serving_table(measurements: Sequence[ServingMeasurement]) -> str:
  """The measurements as a text table, one line per cell, the trivial model's beside its model's."""
  header = (f"{'model':<8} {'procs':>5} {'clients':>7} {'max_batch':>9} {'timeout_us':>10} "
            f"{'p50 ms':>8} {'p99 ms':>8} {'req/s':>7} {'batch':>6} {'errors':>6}")
  lines = [header]
  for m in sorted(measurements, key=lambda m: (m.model == TRIVIAL, m.model, m.processes,
                                              m.clients, m.batching.max_batch_size,
                                              m.batching.batch_timeout_micros)):
    load = m.load
    lines.append(f"{m.model:<8} {m.processes:>5} {m.clients:>7} "
                 f"{m.batching.max_batch_size:>9} {m.batching.batch_timeout_micros:>10} "
                 f"{load.p50_ms:>8.2f} {load.p99_ms:>8.2f} "
                 f"{load.requests_per_second:>7.0f} {load.mean_batch_rows:>6.1f} "
                 f"{load.errors:>6}")
  return "\n".join(lines)


def trivial_overhead(measurements: Sequence[ServingMeasurement], model: str) -> Dict[str, float]:
  """The trivial model's share of `model`'s latency: medians over the cells both measured.

  Returns:
    {"p50_share": median trivial p50 / model p50, "model_p50_ms": ..., "trivial_p50_ms": ...}.
  """
  pairs = {(m.batching, m.processes, m.clients): m for m in measurements if m.model == model}
  shares, model_ms, trivial_ms = [], [], []
  for m in measurements:
    other = pairs.get((m.batching, m.processes, m.clients))
    if m.model == TRIVIAL and other is not None and load_generator.is_measured(m.load) \
        and load_generator.is_measured(other.load):
      shares.append(m.load.p50_ms / other.load.p50_ms)
      model_ms.append(other.load.p50_ms)
      trivial_ms.append(m.load.p50_ms)
  if not shares:
    raise ValueError(f"No cell measured both {model!r} and the trivial model. Received: "
                     f"models {sorted({m.model for m in measurements})}")
  return {"p50_share": float(np.median(shares)), "model_p50_ms": float(np.median(model_ms)),
          "trivial_p50_ms": float(np.median(trivial_ms))}
