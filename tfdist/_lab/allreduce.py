"""All-reduce timing: one all-reduce of gradient-sized tensors, per way of sending it.

`all_reduce_seconds` (run in each task of a 2-worker cluster) times one
all-reduce of a list of gradient-sized tensors, sent as TF's defaults send it
and as tfdist's defaults do (4 MB packs, optionally fp16); `bus_bandwidth`
turns it into nccl-tests' algorithm and bus bandwidth, and
`loopback_bandwidth` is the TCP yardstick.
"""

import dataclasses
import socket
import statistics
import threading
import time
from typing import Dict, List, Sequence

import tensorflow as tf

from tfdist.strategies import _multi_worker_mirrored as multi_worker_mirrored

MB = 2**20


def loopback_bandwidth(megabytes: int = 128, chunk: int = MB, repeats: int = 5) -> float:
  """Bytes per second through one TCP connection on 127.0.0.1 (Python sockets).

  The median of `repeats` transfers of `megabytes`: one transfer swings 2x here.
  """
  return statistics.median(_tcp_transfer(megabytes, chunk) for _ in range(repeats))


def _tcp_transfer(megabytes: int, chunk: int) -> float:
  server = socket.create_server(("127.0.0.1", 0))
  port = server.getsockname()[1]
  received = []

  def sink():
    connection, _ = server.accept()
    total, buffer = 0, bytearray(chunk)
    while True:
      n = connection.recv_into(buffer)
      if not n:
        break
      total += n
    received.append(total)
    connection.close()

  reader = threading.Thread(target=sink)
  reader.start()
  payload = bytes(chunk)
  with socket.create_connection(("127.0.0.1", port)) as sender:
    start = time.perf_counter()
    for _ in range(megabytes * MB // chunk):
      sender.sendall(payload)
  reader.join()
  seconds = time.perf_counter() - start
  server.close()
  return received[0] / seconds


@dataclasses.dataclass(frozen=True)
class AllReduceVariant:
  """How one all-reduce of a list of gradients is sent."""

  name: str
  bytes_per_pack: int  # 0: all tensors in one all-reduce (TF's default).
  wire: str = "float32"  # "float16": cast for the wire and back, as compress_gradients does.


# TF's defaults, tfdist's packs, and tfdist's packs with compress_gradients.
ALL_REDUCE_VARIANTS = (
    AllReduceVariant("raw", 0),
    AllReduceVariant("tfdist", multi_worker_mirrored.BYTES_PER_PACK),
    AllReduceVariant("tfdist_fp16", multi_worker_mirrored.BYTES_PER_PACK, "float16"),
)


def gradient_sizes(total_bytes: float, tensor_bytes: int = MB) -> List[int]:
  """A model's gradients stand-in: `total_bytes` as tensors of `tensor_bytes` (float32)."""
  count = max(1, round(total_bytes / tensor_bytes))
  return [max(4, int(total_bytes) // count)] * count


def all_reduce_seconds(strategy: tf.distribute.Strategy, tensor_bytes: Sequence[int],
                       variants: Sequence[AllReduceVariant], repeats: int) -> Dict[str, float]:
  """Median seconds of one all-reduce of float32 tensors of these sizes, per variant.

  The variants alternate within each repeat, so the machine's noise hits them
  alike. Every task of the cluster must call this at once, with the same
  arguments. Build the strategy with bytes_per_pack=0: a call's options can
  raise the pack size but not bring it back to 0.
  """
  tensors = [tf.ones((max(1, n // 4),)) for n in tensor_bytes]

  def make(variant):
    options = tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=variant.bytes_per_pack)
    wire = tf.dtypes.as_dtype(variant.wire)

    @tf.function
    def reduce(values):
      def replica_fn(*xs):
        # identity: all_reduce of a function input directly fails under MWMS
        # ("destinations can not be empty"); a cast to float32 is a no-op.
        sent = [tf.identity(tf.cast(x, wire)) for x in xs]
        summed = tf.distribute.get_replica_context().all_reduce("sum", sent, options=options)
        return [tf.cast(x, tf.float32) for x in summed]
      return strategy.run(replica_fn, args=tuple(values))
    return reduce

  functions = {v.name: make(v) for v in variants}
  times = {name: [] for name in functions}
  for function in functions.values():
    function(tensors)  # Trace and warm up.
  for _ in range(repeats):
    for name, function in functions.items():
      start = time.perf_counter()
      for result in function(tensors):
        strategy.experimental_local_results(result)[0].numpy()
      times[name].append(time.perf_counter() - start)
  return {name: statistics.median(seconds) for name, seconds in times.items()}


def bus_bandwidth(total_bytes: float, seconds: float, replicas: int,
                  wire: str = "float32") -> Dict[str, float]:
  """nccl-tests' algorithm bandwidth (bytes/time) and bus bandwidth (algbw*2(n-1)/n).

  `algbw` and `busbw` count the float32 bytes the user reduced: for a float16
  wire that is the *effective* gradient bandwidth, twice what crossed it.
  `wire_busbw` counts the bytes sent.
  """
  algbw = total_bytes / seconds
  busbw = algbw * 2 * (replicas - 1) / replicas
  sent = tf.dtypes.as_dtype(wire).size / tf.float32.size
  return {"algbw": algbw, "busbw": busbw, "wire_busbw": busbw * sent}
