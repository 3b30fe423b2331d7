"""tfdist/serving/_serving.py: the grid's choice and TF Serving's batching file.

The servers' processes (started, measured, killed) are tested end to end in
tests/cli/test_bench.py, which runs them once for both; here, that a server
dies with a parent killed by SIGKILL.
"""

import contextlib
import os
import signal
import time

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf import wrappers_pb2

import helpers
from tfdist import serving
from tfdist.serving import _serving


def _batching_parameters_class():
  """TF Serving's BatchingParameters (session_bundle_config.proto), fields 1-4, built here:
  tensorflow_serving is not installed. The numbers and types are the proto's."""
  pool = descriptor_pool.DescriptorPool()
  pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
  proto = descriptor_pb2.FileDescriptorProto(
      name="session_bundle_config.proto", package="tensorflow.serving",
      dependency=["google/protobuf/wrappers.proto"], syntax="proto3")
  message = proto.message_type.add(name="BatchingParameters")
  for number, name in enumerate(["max_batch_size", "batch_timeout_micros",
                                 "max_enqueued_batches", "num_batch_threads"], start=1):
    message.field.add(name=name, number=number, type_name=".google.protobuf.Int64Value",
                      type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
  pool.Add(proto)
  return message_factory.GetMessageClass(
      pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters"))


def test_the_batching_file_parses_as_tf_servings_proto():
  text = serving.batching_parameters_text(serving.Batching(
      max_batch_size=32, batch_timeout_micros=2000, num_batch_threads=2,
      max_enqueued_batches=50))
  parsed = text_format.Parse(text, _batching_parameters_class()())
  assert (parsed.max_batch_size.value, parsed.batch_timeout_micros.value,
          parsed.num_batch_threads.value, parsed.max_enqueued_batches.value) == (32, 2000, 2, 50)
  assert parsed.HasField("batch_timeout_micros")  # Written even when 0: the default is not 0.
  zero = text_format.Parse(serving.batching_parameters_text(serving.Batching(8, 0)),
                           _batching_parameters_class()())
  assert zero.HasField("batch_timeout_micros") and zero.batch_timeout_micros.value == 0


def _row(size, timeout, p99, rps, *, model="model", clients=16, errors=0, processes=1):
  load = serving.Load(requests=100, errors=errors, seconds=1.0, p50_ms=p99 / 2, p99_ms=p99,
                    requests_per_second=rps, rows_per_second=rps, mean_batch_rows=1.0)
  return serving.ServingMeasurement(model, serving.Batching(size, timeout), processes, clients, load)


ROWS = [_row(8, 0, p99=10, rps=500), _row(8, 2000, p99=14, rps=700),
        _row(32, 10000, p99=30, rps=900), _row(32, 0, p99=12, rps=2000, errors=1),
        _row(32, 2000, p99=5, rps=5000, clients=2), _row(32, 2000, p99=5, rps=9000,
                                                         model=_serving.TRIVIAL)]


def test_chooses_the_most_requests_per_second_that_meet_the_target():
  # The row with an error, the light load's and the trivial model's never compete.
  assert serving.choose_batching(ROWS, 15).batching == serving.Batching(8, 2000)
  assert serving.choose_batching(ROWS, 30).batching == serving.Batching(32, 10000)
  assert serving.choose_batching(ROWS, 15, clients=2).batching == serving.Batching(32, 2000)


def test_a_target_no_setting_met_names_the_target_and_the_best_p99():
  with pytest.raises(ValueError, match=r"`latency_target_ms`=8: the best p99 measured was "
                     r"10\.00 ms \(max_batch_size=8, batch_timeout_micros=0, 1 process, 16 "
                     r"clients\).*Received: latency_target_ms=8"):
    serving.choose_batching(ROWS, 8)
  with pytest.raises(ValueError, match=r"must be > 0. Received: latency_target_ms=0"):
    serving.choose_batching(ROWS, 0)


def test_the_trivial_models_share_and_the_table():
  share = serving.trivial_overhead(
      [_row(8, 0, p99=10, rps=1), _row(8, 0, p99=4, rps=1, model=_serving.TRIVIAL)],
      "model")
  assert share == {"p50_share": 0.4, "model_p50_ms": 5.0, "trivial_p50_ms": 2.0}
  lines = serving.serving_table(ROWS).splitlines()
  assert lines[0].split() == ["model", "procs", "clients", "max_batch", "timeout_us", "p50",
                              "ms", "p99", "ms", "req/s", "batch", "errors"]
  assert lines[-1].split()[0] == "trivial" and len(lines) == len(ROWS) + 1


def test_a_setting_must_be_whole_numbers():
  with pytest.raises(ValueError, match=r"`max_batch_size` must be an integer >= 1. "
                     r"Received: max_batch_size=0"):
    serving.Batching(max_batch_size=0)
  with pytest.raises(ValueError, match=r"`batch_timeout_micros` must be an integer >= 0. "
                     r"Received: batch_timeout_micros=1.5"):
    serving.Batching(batch_timeout_micros=1.5)


def _servers_under(folder) -> list:
  """The pids of the batching servers whose command line names `folder` (their spec's)."""
  pids = []
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        command = f.read().decode(errors="replace")
      with open(f"/proc/{pid}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:  # Gone meanwhile.
      continue
    if str(folder) in command and "_batching_server" in command and state != "Z":
      pids.append(int(pid))
  return pids


@pytest.mark.slow
def test_a_server_dies_with_the_process_that_started_it(tmp_path):
  # A server of no model still imports TensorFlow and then serves forever: only
  # its parent's death may end it. The parent is killed as soon as the server
  # runs, before it is ready: a server outliving it would serve on.
  parent_code = ("import time\nfrom tfdist.serving import _serving\n"
                 "with _serving.start_servers({}, [], 1, timeout=600):\n  time.sleep(600)\n")
  servers = []
  with helpers.spawned(helpers.python("-c", parent_code), env={"TMPDIR": str(tmp_path)}) as parent:
    try:
      deadline = time.monotonic() + 60
      while not servers and parent.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        servers = _servers_under(tmp_path)
      assert servers, parent.poll()
      os.kill(parent.pid, signal.SIGKILL)  # No handler of the parent's runs.
      parent.wait(30)
      deadline = time.monotonic() + 30
      while _servers_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
      assert not _servers_under(tmp_path)
    finally:
      for pid in _servers_under(tmp_path):  # Each leads its own session: its group.
        with contextlib.suppress(ProcessLookupError):
          os.killpg(pid, signal.SIGKILL)
