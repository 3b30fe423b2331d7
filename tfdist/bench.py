"""Measurements for `tfdist bench`: ratios timed side by side, medians of interleaved runs.

Each comparison runs its variants in one process, alternating A, B, A, B, ...,
so the machine's noise hits them alike, and reports the median of the per-pair
ratios. Nothing here asserts a speed: the numbers are printed and saved.

- `strategy_overhead`: `model.fit` step time under a tfdist-built strategy over
  the same strategy built with raw `tf.distribute`, by wall and by CPU time.
- `small_model_overhead`: a small MLP under MirroredStrategy over 2 logical
  devices, over the same MLP with no strategy; with Keras defaults and with
  `steps_per_execution(strategy)`.
- `all_reduce_seconds` (run in each task of a 2-worker cluster): one
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
from typing import Callable, Dict, List, Sequence

import numpy as np
import tensorflow as tf
import tf_keras as keras

from tfdist import strategies
from tfdist import training

MB = 2**20


def steps_per_execution(strategy: tf.distribute.Strategy) -> int:
  """How many steps Keras should run per call under `strategy`.

  Every call of Keras's train function pays the strategy's fixed cost (about
  1-2 ms on a CPU: dispatch to each replica, gathering the results), which
  dwarfs a small model's step. Running several steps per call pays it once for
  all of them: `model.compile(..., steps_per_execution=steps_per_execution(s))`.
  One replica has little to amortise.
  """
  return 1 if strategy.num_replicas_in_sync == 1 else 10


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def interleaved_ratio(a: Callable[[], Dict[str, float]], b: Callable[[], Dict[str, float]],
                      repeats: int) -> Dict[str, Dict[str, float]]:
  """Per clock, the median of b()/a() over `repeats` alternating pairs.

  `a` and `b` return seconds by clock name (see `CLOCKS`). Wall time is what a
  user waits; CPU time (all threads of the process) is the work done, which
  on this kind of shared VM is far steadier (FACTS.md: identical strategies
  0.996-1.005 by CPU time, +-5% by wall time), so overheads are judged by it.
  Odd pairs run b first: whatever a run leaves behind (a prefetch thread still
  filling its buffer, memory to give back) then lands on each side equally.
  """
  samples = []
  for pair in range(repeats):
    if pair % 2:
      tb = b()
      ta = a()
    else:
      ta = a()
      tb = b()
    samples.append((ta, tb))
  return {clock: {"ratio": statistics.median(tb[clock] / ta[clock] for ta, tb in samples),
                  "a_ms": 1000 * statistics.median(ta[clock] for ta, _ in samples),
                  "b_ms": 1000 * statistics.median(tb[clock] for _, tb in samples)}
          for clock in samples[0][0]}


def mlp() -> keras.Model:
  """MLP 784-512-512-10, the small model of FACTS.md's measurements."""
  return keras.Sequential([keras.Input((784,)), keras.layers.Dense(512, activation="relu"),
                           keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)])


def convnet() -> keras.Model:
  """A compute-bound CNN for `tfdist scale`: wide 3x3 convolutions on the 8x8 digits.

  223k parameters (0.9 MB of gradients) against about 0.7 ms of compute per
  example on one core here: far more compute per byte synchronised than the
  default job's CNN, whose 10 ms steps at batch 1024 are dwarfed by MWMS's
  per-step latency on localhost.
  """
  return keras.Sequential([
      keras.Input((8, 8, 1)),
      keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
      keras.layers.Conv2D(128, 3, padding="same", activation="relu"),
      keras.layers.Conv2D(128, 3, padding="same", activation="relu"),
      keras.layers.GlobalAveragePooling2D(),
      keras.layers.Dense(10)])


MODELS = {"cnn": (training.small_cnn, (8, 8, 1)), "convnet": (convnet, (8, 8, 1)),
          "mlp": (mlp, (784,))}


def _dataset(input_shape: Sequence[int], batch_size: int) -> tf.data.Dataset:
  rng = np.random.default_rng(0)
  x = rng.random((batch_size * 16,) + tuple(input_shape)).astype("float32")
  y = rng.integers(0, 10, batch_size * 16)
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(
      batch_size, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)


def fit_timer(model_fn: Callable[[], keras.Model], input_shape: Sequence[int],
              strategy: tf.distribute.Strategy = None, *, batch_size: int = 64,
              steps: int = 100,
              steps_per_execution: int = 1) -> Callable[[], Dict[str, float]]:
  """A function timing one `fit` of `steps` steps: seconds per step by clock; warmed up once."""
  scope = strategy.scope() if strategy is not None else _no_scope()
  with scope:
    model = model_fn()
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=steps_per_execution)
  dataset = _dataset(input_shape, batch_size)
  if strategy is not None:
    dataset = strategy.experimental_distribute_dataset(dataset)

  clock = EpochClock()

  def run() -> Dict[str, float]:
    model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[clock])
    return {name: seconds / steps for name, seconds in clock.seconds.items()}

  run()  # Tracing and the first steps are not what we measure.
  return run


class EpochClock(keras.callbacks.Callback):
  """Seconds from an epoch's first step to its end, by clock.

  Only the steps: `fit`'s set-up and the distributed iterator it builds per
  call cost tens of ms of their own, which would swamp a few ms of strategy.
  """

  def on_epoch_begin(self, epoch, logs=None):
    self._start = {name: now() for name, now in CLOCKS.items()}

  def on_epoch_end(self, epoch, logs=None):
    self.seconds = {name: now() - self._start[name] for name, now in CLOCKS.items()}


class _no_scope:
  def __enter__(self):
    return None

  def __exit__(self, *exc):
    return False


def raw_strategy(name: str) -> tf.distribute.Strategy:
  """The strategy as a user builds it with tf.distribute alone (same devices, same all-reduce)."""
  # Named explicitly: without GPUs, TF's defaults use /cpu:0 alone, whatever
  # the logical split.
  devices = [d.name for d in tf.config.list_logical_devices("CPU")]
  if name == "one_device":
    return tf.distribute.OneDeviceStrategy("/cpu:0")
  if name == "mirrored":
    # The all-reduce tfdist's `auto` picks without GPUs; TF's own default
    # (collectives) cannot be built twice in one process (tensorflow#62790).
    return tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
  if name == "central_storage":
    return tf.distribute.experimental.CentralStorageStrategy(devices)
  raise ValueError(f"No raw counterpart for {name!r}; use one of "
                   f"['one_device', 'mirrored', 'central_storage']. Received: {name!r}")


def strategy_overhead(names: Sequence[str], models: Sequence[str], repeats: int,
                      steps: int = 100) -> List[dict]:
  """Rows of fit step time, tfdist strategy (b) over raw tf.distribute strategy (a).

  Each row has "model", "strategy" and, per clock, `interleaved_ratio`'s result.
  """
  rows = []
  for model in models:
    model_fn, shape = MODELS[model]
    for name in names:
      raw = fit_timer(model_fn, shape, raw_strategy(name), steps=steps)
      ours = fit_timer(model_fn, shape, strategies.make_strategy(name), steps=steps)
      rows.append({"model": model, "strategy": name, **interleaved_ratio(raw, ours, repeats)})
  return rows


def small_model_overhead(repeats: int, steps: int = 100) -> Dict[str, dict]:
  """The MLP under Mirrored over 2 logical devices (b), over the MLP without a strategy (a).

  "raw" is tf.distribute with Keras's defaults, "tfdist" adds
  `steps_per_execution(strategy)`; each holds `interleaved_ratio`'s result per clock.
  """
  model_fn, shape = MODELS["mlp"]
  plain = fit_timer(model_fn, shape, steps=steps)
  raw = fit_timer(model_fn, shape, raw_strategy("mirrored"), steps=steps)
  strategy = strategies.make_strategy("mirrored")
  ours = fit_timer(model_fn, shape, strategy, steps=steps,
                   steps_per_execution=steps_per_execution(strategy))
  return {"raw": interleaved_ratio(plain, raw, repeats),
          "tfdist": interleaved_ratio(plain, ours, repeats),
          "replicas": strategy.num_replicas_in_sync}


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
    AllReduceVariant("tfdist", strategies.BYTES_PER_PACK),
    AllReduceVariant("tfdist_fp16", strategies.BYTES_PER_PACK, "float16"),
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


def bus_bandwidth(total_bytes: float, seconds: float, replicas: int) -> Dict[str, float]:
  """nccl-tests' algorithm bandwidth (bytes/time) and bus bandwidth (algbw*2(n-1)/n).

  fp16 rows count the float32 bytes the user reduced, not the bytes sent.
  """
  algbw = total_bytes / seconds
  return {"algbw": algbw, "busbw": algbw * 2 * (replicas - 1) / replicas}
