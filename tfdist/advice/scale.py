"""How well will this model scale: measured on 1 and 2 local workers, then the α-β model.

`measure_worker` runs in each task of a 1- or 2-worker MultiWorkerMirrored
cluster, each worker pinned to its own core, and times:
  - the synchronous fit step at the chosen batch ("synced");
  - the same model trained with no strategy ("plain"): alone (1 worker)
    against 2 at once, what sharing this machine's caches and memory costs,
    which separate machines would not pay;
  - both at batch 1 ("synced_tiny", "plain_tiny"), whose difference is the
    step's communication with almost no compute: its latency, once the bytes
    are taken out;
  - the bus bandwidth of a 16 MB (or gradient-sized, if larger) all-reduce.
`analyse` turns alternated 1- and 2-worker measurements into the α-β model's
inputs (`scaling_model`), its predictions, and the check against the 2-worker
step measured here.
"""

import dataclasses
import math
import os
import statistics
from typing import Callable, Dict, List, Sequence, Tuple

from tfdist.advice import scaling_model

REPLICAS = (1, 2, 4, 8, 16, 32, 64)


def pin_to_core(core: int) -> None:
  """Pins every thread of this process to one core.

  Every thread: affinity is per thread on Linux, and threads started by
  earlier imports would otherwise roam.
  """
  for thread in os.listdir("/proc/self/task"):
    try:
      os.sched_setaffinity(int(thread), {core})
    except ProcessLookupError:  # The thread has ended.
      pass


def measure_worker(strategy, model_fn: Callable, *, batch_size: int, steps: int,
                   repeats: int, compress_gradients: bool, seed: int,
                   raw: bool = True, longer: int = 0,
                   min_fit_seconds: float = 0.0) -> Dict[str, float]:
  """Seconds per step of each timer (medians of `repeats`), gradient bytes and busbw.

  With `raw`, a 2-worker run also times Keras's own step ("raw"), beside tfdist's.
  With `min_fit_seconds`, fits take more than `steps` steps where the synced
  step would finish sooner, as `_candidates` times the local ways: a fit's
  first steps and its end weigh little only in a long fit. The workers agree
  on the count ("steps" in the result). With `longer`, "synced_check" times
  fits `longer` times as long as "synced"'s, in the same rounds (what
  `tfdist advise --check` holds the advice to).

  Every task of the cluster must call this at once, with the same arguments.
  """
  import numpy as np
  import tensorflow as tf
  import tf_keras as keras
  from tfdist.training import compression
  from tfdist.training import fit_step
  from tfdist._lab import allreduce
  from tfdist._lab import collectives
  from tfdist._lab import harness
  from tfdist.strategies import _multi_worker_mirrored as multi_worker_mirrored
  rng = np.random.default_rng(seed)
  num_workers = strategy.num_replicas_in_sync

  def compiled(distributed: bool, keras_own_step: bool = False):
    model = model_fn()
    if model.optimizer is None:
      model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    if distributed and not keras_own_step:
      if compress_gradients:
        compression.compress_gradients(model.optimizer)
      fit_step.synchronise_once(model, strategy)
    return model

  def dataset_for(model, batch: int, distributed: bool = True):
    """Random data of the model's shapes, repeated, distributed if asked."""
    if not distributed:
      return harness.random_like(model, batch, rng)
    return strategy.distribute_datasets_from_function(
        lambda context: harness.random_like(model, batch, rng))

  def fit_timer(model, batch: int, distributed: bool, fit_steps: int):
    """A function timing one fit of the model on random data of its shapes: seconds/step."""
    dataset = dataset_for(model, batch, distributed)
    timer = harness.epoch_timer(model, dataset, fit_steps, warmup=False)
    return lambda: timer()["wall"]

  @tf.function
  def barrier():
    # Every worker starts each timed fit together, the unsynchronised ones too.
    one = lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.identity(1.0))
    return strategy.run(one)

  @tf.function
  def total_over_replicas(value):
    return strategy.reduce("SUM", strategy.run(tf.identity, args=(value,)), axis=None)

  def synchronised(timer):
    def run():
      barrier()
      return timer()
    return run

  with strategy.scope():
    model = compiled(distributed=True)
    # Keras's own step, as raw tf_keras runs it: the column tfdist is judged against.
    keras_step = compiled(distributed=True, keras_own_step=True)
  # The same model with no strategy: the same compute, nothing to synchronise.
  plain = compiled(distributed=False)
  if min_fit_seconds:
    calibrate = synchronised(fit_timer(model, batch_size, distributed=True, fit_steps=steps))
    calibrate()  # Traces.
    needed = float(math.ceil(min_fit_seconds / max(calibrate(), 1e-6)))
    # Whole numbers sum exactly: every worker computes the same mean.
    mean = float(total_over_replicas(tf.constant(needed))) / strategy.num_replicas_in_sync
    steps = max(steps, math.ceil(mean))
  timers = {"synced": fit_timer(model, batch_size, distributed=True, fit_steps=steps),
            "plain": fit_timer(plain, batch_size, distributed=False, fit_steps=steps)}
  if longer:
    timers["synced_check"] = fit_timer(model, batch_size, distributed=True,
                                       fit_steps=longer * steps)
  if num_workers > 1:
    if raw:
      timers["raw"] = fit_timer(keras_step, batch_size, distributed=True, fit_steps=steps)
    timers["synced_tiny"] = fit_timer(model, 1, distributed=True, fit_steps=steps)
    timers["plain_tiny"] = fit_timer(plain, 1, distributed=False, fit_steps=steps)

  # Not reversed on odd rounds: every worker must run the same timer at once,
  # and each round's order is the same on all of them either way.
  seconds = {name: [] for name in timers}
  for _ in range(repeats + 1):  # The first round traces and warms up.
    for name, timer in timers.items():
      seconds[name].append(synchronised(timer)())
  result = {name: statistics.median(times[1:]) for name, times in seconds.items()}
  result["steps"] = steps
  # What a step communicates, tfdist's defaults against raw tf_keras: traced,
  # not run (every worker traces the same, as collectives' keys need).
  for name, counted in (("tfdist", model), ("raw", keras_step)):
    counted.make_train_function()
    step = collectives.per_step(counted, iter(dataset_for(counted, batch_size)))
    result[f"collectives_{name}"], result[f"collective_bytes_{name}"] = step.count, step.bytes
  result["gradient_bytes"] = sum(int(np.prod(v.shape)) * v.dtype.size
                                 for v in model.trainable_variables)
  if num_workers > 1:
    # Bandwidth where latency no longer counts: at least 16 MB, in the
    # model's packs, float16 on the wire if the model compresses.
    size = max(result["gradient_bytes"], 16 * allreduce.MB)
    variant = allreduce.AllReduceVariant("model", multi_worker_mirrored.BYTES_PER_PACK,
                                         "float16" if compress_gradients else "float32")
    all_reduce = allreduce.all_reduce_seconds(strategy, allreduce.gradient_sizes(size),
                                              [variant], repeats=max(5, repeats))["model"]
    result["busbw"] = allreduce.bus_bandwidth(size, all_reduce, num_workers)["busbw"]
    # The floor of a step's synchronisation: one all-reduce of its gradients, alone.
    result["gradient_all_reduce"] = allreduce.all_reduce_seconds(
        strategy, allreduce.gradient_sizes(result["gradient_bytes"]), [variant],
        repeats=max(5, repeats))["model"]
  return result


@dataclasses.dataclass(frozen=True)
class ScaleReport:
  """The α-β model's inputs measured here, its predictions, and its check on 2 workers."""

  compute: float  # Seconds per step on 1 worker.
  slowdown: float  # Co-located compute / alone, from the plain copy.
  gradient_bytes: float
  busbw: float
  bytes_seconds: float  # One all-reduce of the gradients on 2 workers.
  communication: float  # Per-step communication at batch 1 on 2 workers.
  latency: float  # communication less the bytes.
  two_step: float  # The 2-worker step measured here.
  predictions: List[scaling_model.Prediction]
  predicted: float  # Efficiency on 2 co-located workers, predicted.
  efficiencies: List[float]  # Measured, per pair.
  measured: float
  error: float  # |predicted - measured| / measured.
  raw_two_step: float  # Keras's own step on 2 workers, timed in the same rounds.
  raw_measured: float  # Its efficiency.
  gradient_all_reduce: float  # One all-reduce of the gradients alone, on 2 workers.

  @property
  def sync_ratio(self) -> float:
    """A step's communication ÷ one all-reduce of its gradients: 1 is the floor."""
    return self.communication / self.gradient_all_reduce

  @property
  def colocated(self) -> float:
    return self.compute * self.slowdown

  def text(self, *, model: str, per_replica_batch_size: int, counts: Dict[str, float],
           compressed: bool = False) -> str:
    """What `tfdist scale` prints: the inputs measured, the predictions, their check, advice.

    `counts`: the 2-worker run's collectives per step (`collectives_raw`,
    `collectives_tfdist`, and their `collective_bytes_*`).
    """
    fp16 = " (float16 on the wire, counted in float32 bytes)" if compressed else ""
    lines = [
        f"\nmodel {model}, batch {per_replica_batch_size} per replica; medians of "
        f"{len(self.efficiencies)} alternated 1- and 2-worker runs:",
        f"  compute         {1000 * self.compute:8.1f} ms per step on 1 worker",
        f"  co-located      {1000 * self.colocated:8.1f} ms per step, 2 workers computing at "
        f"once on this machine ({self.slowdown - 1:+.0%} for a plain copy of the model: shared "
        "caches and memory)",
        f"  gradients       {self.gradient_bytes / 2**20:8.2f} MB; all-reduce bus bandwidth "
        f"{self.busbw / 1e9:.3f} GB/s{fp16}: {1000 * self.bytes_seconds:.1f} ms per step on 2 "
        "workers",
        f"  latency         {1000 * self.latency:8.1f} ms per step on 2 workers (communication "
        f"at batch 1, {1000 * self.communication:.1f} ms, less the bytes)",
        f"  sync ÷ floor    {self.sync_ratio:8.1f}× one all-reduce of the gradients alone "
        f"({1000 * self.gradient_all_reduce:.2f} ms)",
        f"  collectives     {counts['collectives_tfdist']} per step with tfdist's defaults "
        f"({counts['collective_bytes_tfdist'] / 1024:.1f} KB), {counts['collectives_raw']} "
        f"with raw tf_keras ({counts['collective_bytes_raw'] / 1024:.1f} KB): each a round "
        "trip between the workers",
        "\npredicted on separate machines (α-β model):",
        f"{'replicas':>8} {'step ms':>8} {'efficiency':>11}"]
    lines += [f"{p.replicas:>8} {1000 * p.step_seconds:>8.1f} {p.efficiency:>10.0%}"
              for p in self.predictions]
    lines += [
        f"\n2 workers on this machine: predicted {self.predicted:.0%}, measured "
        f"{self.measured:.0%} ({1000 * self.two_step:.1f} ms per step; pairs: "
        f"{', '.join(f'{e:.0%}' for e in self.efficiencies)}); prediction off by "
        f"{self.error:.0%}",
        f"  raw tf_keras, same rounds: {self.raw_measured:.0%} ({1000 * self.raw_two_step:.1f} "
        f"ms per step); tfdist / raw step time {self.two_step / self.raw_two_step:.2f}",
        "\n" + scaling_model.advice(self.compute, self.gradient_bytes, self.busbw,
                                    self.measured, compressed=compressed,
                                    latency_seconds=self.latency)]
    return "\n".join(lines)

  def as_dict(self, *, per_replica_batch_size: int, counts: Dict[str, float]) -> dict:
    """What `tfdist scale --output` writes (JSON); `counts` as for `text`."""
    return {"compute_seconds": self.compute, "colocated_seconds": self.colocated,
            "two_worker_seconds": self.two_step,
            "per_replica_batch_size": per_replica_batch_size,
            "latency_seconds": self.latency, "gradient_bytes": self.gradient_bytes,
            "busbw": self.busbw, "measured_efficiency_2": self.measured,
            "measured_efficiency_2_per_pair": self.efficiencies,
            "predicted_efficiency_2": self.predicted,
            "prediction_error_2": self.error,
            "raw_two_worker_seconds": self.raw_two_step,
            "gradient_all_reduce_seconds": self.gradient_all_reduce,
            "sync_ratio": self.sync_ratio,
            "raw_measured_efficiency_2": self.raw_measured,
            "predicted": {p.replicas: p.efficiency for p in self.predictions},
            "collectives_per_step": {name: counts[f"collectives_{name}"]
                                     for name in ("raw", "tfdist")},
            "collective_bytes_per_step": {name: counts[f"collective_bytes_{name}"]
                                          for name in ("raw", "tfdist")}}


def analyse(pairs: Sequence[Tuple[Dict[str, float], Dict[str, float]]],
            replicas: Sequence[int] = REPLICAS) -> ScaleReport:
  """Medians over alternated (1-worker, 2-worker) measurements, and the α-β model on them."""
  twos = [two for _, two in pairs]
  gradient_bytes = pairs[0][0]["gradient_bytes"]
  compute = statistics.median(one["synced"] for one, _ in pairs)
  slowdown = statistics.median(two["plain"] / one["plain"] for one, two in pairs)
  busbw = statistics.median(two["busbw"] for two in twos)
  bytes_seconds = scaling_model.communication_seconds(gradient_bytes, busbw, 2)
  communication = statistics.median(two["synced_tiny"] - two["plain_tiny"] for two in twos)
  latency = scaling_model.latency_seconds(communication, gradient_bytes, busbw)
  predictions = scaling_model.predict(compute, gradient_bytes, busbw, replicas, latency)
  # Here the 2 workers share one machine: the same model, co-located compute.
  here = scaling_model.predict(compute * slowdown, gradient_bytes, busbw, [2], latency)[0]
  predicted = compute / here.step_seconds
  efficiencies = [one["synced"] / two["synced"] for one, two in pairs]
  measured = statistics.median(efficiencies)
  raw_measured = statistics.median(one["synced"] / two["raw"] for one, two in pairs)
  return ScaleReport(
      compute=compute, slowdown=slowdown, gradient_bytes=gradient_bytes, busbw=busbw,
      bytes_seconds=bytes_seconds, communication=communication, latency=latency,
      two_step=statistics.median(two["synced"] for two in twos), predictions=predictions,
      predicted=predicted, efficiencies=efficiencies, measured=measured,
      error=abs(predicted - measured) / measured,
      raw_two_step=statistics.median(two["raw"] for two in twos), raw_measured=raw_measured,
      gradient_all_reduce=statistics.median(two["gradient_all_reduce"] for two in twos))
