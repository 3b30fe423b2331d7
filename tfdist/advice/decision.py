"""Which strategy should I use? One recommendation from measurements, with its reasons.

`decide` is the decision table: it takes what `tfdist advise` measured (each
single-machine way timed here, the model's memory, and what the links
between workers cost a step) and the cluster the user has, and ranks every
way to train by examples per second:
  - the ways that run on one machine are timed on it, side by side in one
    process (`_candidates`);
  - multi-worker MirroredStrategy is measured when the cluster is 2 workers
    on this machine, else predicted with the α-β model of `tfdist scale`
    (`scaling_model`): compute, plus latency per extra worker, plus the ring
    all-reduce of the gradient bytes;
  - a model that does not fit one device's memory rules out every data-parallel
    way (each replica holds it all) and brings in model parallelism
    (`tfdist.placement.place_layers`) with micro-batches, timed here;
  - parameter servers are described, not ranked: their step is asynchronous,
    so its speed is not comparable by examples per second alone.
Then it adds the batch and learning-rate scaling, the communication settings
(pack size, float16 gradients) and what to change in the input pipeline.
`tfdist.advice._advice_check` holds an advice to a longer measurement of every
way it ranked; `tfdist.advice._advice` measures and advises (`tfdist.advise`).

Example:

    >>> advice = decide(measurements, Cluster(workers=2, devices_per_worker=2))
    >>> print(advice)
    >>> advice.pick.name
    'one_device'
"""

import dataclasses
import math
from typing import Dict, List, Optional

from tfdist import _choices as choices
from tfdist._choices import Name
from tfdist.advice import memory
from tfdist.advice import scaling_model

# Within this share of the fastest, the simpler way is picked: fewer processes
# and replicas, for a difference smaller than the noise of a few timed steps.
SIMPLER_WITHIN = 0.03
# Gradients cross in float16 when their bytes take this share of a step or more.
COMPRESS_ABOVE = 0.10
INPUT_BOUND = 0.20  # The TF profiler's "highly input-bound".
# One device at the largest global batch of the other ways (`Measurements.step` key).
ONE_DEVICE_LARGE = "one_device (global batch)"
PS_NOTE = ("parameter_server: not ranked. Its workers step asynchronously, each sending "
           "its gradients to and reading the variables from the ps tasks every step, so "
           "the model trains differently, not only at another speed. Choose it for workers "
           "that come and go (preemptible machines keep training) or variables sharded "
           "over ps tasks.")


@dataclasses.dataclass(frozen=True)
class Cluster:
  """The machines the user has: `workers` x `devices_per_worker` devices."""

  workers: int = 1
  devices_per_worker: int = 1
  # The workers are processes on this machine (as `tfdist launch` starts them),
  # not separate machines like it.
  colocated: bool = True
  memory_per_device: Optional[float] = None  # Bytes; None: no limit given.

  def __post_init__(self):
    for field in ("workers", "devices_per_worker"):
      value = getattr(self, field)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{field}` must be an integer >= 1. Received: {field}={value!r}")
    if self.memory_per_device is not None and self.memory_per_device <= 0:
      raise ValueError("`memory_per_device` must be > 0 bytes, or None for no limit. "
                       f"Received: memory_per_device={self.memory_per_device!r}")


@dataclasses.dataclass(frozen=True)
class Links:
  """What synchronising a step between workers costs (`tfdist scale` measures the same)."""

  busbw: float  # Bytes/s of a large ring all-reduce.
  latency: float  # Seconds per step on 2 workers beyond the bytes.
  two_workers: Optional[float] = None  # The 2-worker step measured here, seconds.


@dataclasses.dataclass(frozen=True)
class Measurements:
  """What `tfdist advise` measured for one model."""

  batch_size: int  # Per replica.
  footprint: memory.Footprint
  step: Dict[str, float]  # Seconds per step timed here, by way (see `_candidates`).
  links: Optional[Links] = None
  input_share: Optional[float] = None  # Of step time waiting for data; None: not measured.
  micro_batches: int = 1  # Of the timed model_parallel way.
  peak: Optional[int] = None  # Bytes TF measured at peak, where it reports one.


@dataclasses.dataclass(frozen=True)
class Option:
  """One way to train, ranked by examples per second."""

  name: str
  replicas: int
  global_batch: int
  step_seconds: float
  examples_per_second: float
  source: str  # "measured here" or "predicted (α-β)".
  fits: bool = True
  note: str = ""


@dataclasses.dataclass(frozen=True)
class Advice:
  pick: Optional[Option]  # None: nothing fits the memory given.
  options: List[Option]
  reasons: List[str]  # Why the pick, then the settings: batch, communication, memory, input.
  efficiency: Optional[float] = None  # Of the pick, against one device's examples/s x replicas.

  def as_dict(self) -> dict:
    """As JSON-ready data: the pick, every option, and the reasons."""
    return dataclasses.asdict(self)

  def __str__(self) -> str:
    lines = [f"{'way':<44} {'replicas':>8} {'batch':>6} {'step ms':>8} {'examples/s':>11}  source"]
    for o in self.options:
      mark = "*" if self.pick is not None and o.name == self.pick.name else " "
      lines.append(f"{mark}{o.name:<43} {o.replicas:>8} {o.global_batch:>6} "
                   f"{1000 * o.step_seconds:>8.2f} {o.examples_per_second:>11.0f}  {o.source}"
                   + ("" if o.fits else "  (does not fit)"))
    head = ("recommendation: nothing fits; see below" if self.pick is None
            else f"recommendation: {self.pick.name}")
    return "\n".join([head, ""] + lines + [""] + [f"- {r}" for r in self.reasons])


def _model_parallel_name(devices: int, micro_batches: int) -> str:
  return f"model_parallel ({devices} devices, {micro_batches} micro-batches)"


def _multi_worker(m: Measurements, cluster: Cluster) -> Optional[Option]:
  """multi_worker_mirrored on the cluster: measured for 2 workers here, else the α-β model."""
  if cluster.workers < 2 or m.links is None:
    return None
  local = Name.MIRRORED if cluster.devices_per_worker > 1 else Name.ONE_DEVICE
  replicas = cluster.workers * cluster.devices_per_worker
  batch = m.batch_size * replicas
  if cluster.colocated and cluster.workers == 2 and m.links.two_workers is not None:
    step, source = m.links.two_workers, "measured here"
  else:
    compute = m.step[local]
    if cluster.colocated:
      # The workers share this machine's cores: each computes at 1/workers of its speed.
      compute *= cluster.workers
    step = scaling_model.predict(compute, m.footprint.gradients, m.links.busbw,
                                 [cluster.workers], m.links.latency)[0].step_seconds
    source = "predicted (α-β)"
  return Option(Name.MULTI_WORKER_MIRRORED, replicas, batch, step, batch / step, source,
                note=f"{cluster.workers} workers x {cluster.devices_per_worker} device(s)")


def _options(m: Measurements, cluster: Cluster) -> List[Option]:
  fits = (cluster.memory_per_device is None
          or m.footprint.total <= cluster.memory_per_device)
  options = []
  for name in choices.strategy_names(choices.SINGLE_MACHINE):
    if name in m.step:
      replicas = 1 if name == Name.ONE_DEVICE else cluster.devices_per_worker
      batch = m.batch_size * replicas
      options.append(Option(name, replicas, batch, m.step[name], batch / m.step[name],
                            "measured here", fits))
  if ONE_DEVICE_LARGE in m.step:
    # One device at the largest global batch of the others: where more replicas
    # add no compute (logical devices sharing cores), this is the fastest.
    batch = m.batch_size * cluster.workers * cluster.devices_per_worker
    large_fits = (cluster.memory_per_device is None
                  or m.footprint.at_batch(batch, m.batch_size).total <= cluster.memory_per_device)
    options.append(Option(ONE_DEVICE_LARGE, 1, batch, m.step[ONE_DEVICE_LARGE],
                          batch / m.step[ONE_DEVICE_LARGE], "measured here", large_fits,
                          note="the same global batch as the largest way"))
  multi = _multi_worker(m, cluster)
  if multi is not None:
    options.append(dataclasses.replace(multi, fits=fits))
  if "model_parallel" in m.step:
    step = m.step["model_parallel"]
    split_fits = (cluster.memory_per_device is None or m.footprint.devices_needed(
        cluster.memory_per_device) <= cluster.devices_per_worker)
    options.append(Option(_model_parallel_name(cluster.devices_per_worker, m.micro_batches), 1,
                          m.batch_size, step, m.batch_size / step, "measured here", split_fits))
  return options


def _pick(options: List[Option]) -> Optional[Option]:
  """The fastest that fits; the simplest (fewest replicas) within SIMPLER_WITHIN of it."""
  fitting = [o for o in options if o.fits]
  if not fitting:
    return None
  best = max(o.examples_per_second for o in fitting)
  close = [o for o in fitting if o.examples_per_second >= (1 - SIMPLER_WITHIN) * best]
  return min(close, key=lambda o: (o.replicas, -o.examples_per_second))


def _why(pick: Option, options: List[Option]) -> str:
  others = [o for o in options if o.fits and o is not pick]
  if not others:
    return f"{pick.name} is the only way considered that fits."
  runner = max(others, key=lambda o: o.examples_per_second)
  ratio = pick.examples_per_second / runner.examples_per_second
  if ratio >= 1:
    return (f"{pick.name} trains {ratio:.2f}x the examples/s of the next best, "
            f"{runner.name}.")
  return (f"{pick.name} is within {1 - ratio:.0%} of {runner.name} with fewer replicas: "
          "simpler to run, and the same speed within the noise.")


def _batch_and_learning_rate(pick: Option, batch_size: int, learning_rate: float) -> str:
  factor = pick.global_batch // batch_size
  if factor == 1:
    return (f"batch: {batch_size} per step, one replica: keep your learning rate "
            f"({learning_rate:g}).")
  batch = (f"{batch_size} per replica, {pick.global_batch} global over {pick.replicas} "
           "replicas" if pick.replicas > 1 else f"{pick.global_batch} on one replica")
  how = ("`tfdist train --lr_scaling linear --warmup_steps <~5 epochs of steps>` or "
         "tfdist.scale_learning_rate(rate, strategy, warmup_steps=...)" if pick.replicas == factor else
         "tfdist.scale_learning_rate(rate, num_replicas=<batch ratio>, warmup_steps=...)")
  return (f"batch: {batch}; learning rate {learning_rate:g} x {factor} = "
          f"{learning_rate * factor:g} (linear rule for a {factor}x batch, Goyal et al. 2017) "
          f"with a warm-up over the first epochs: {how}.")


def _communication(m: Measurements, cluster: Cluster, pick: Option) -> Optional[str]:
  if pick.name != Name.MULTI_WORKER_MIRRORED or m.links is None:
    return None
  from tfdist.strategies._multi_worker_mirrored import BYTES_PER_PACK
  gradients = m.footprint.gradients
  packs = max(1, math.ceil(gradients / BYTES_PER_PACK))
  bytes_seconds = scaling_model.communication_seconds(gradients, m.links.busbw, cluster.workers)
  line = (f"communication: {gradients / 2**20:.2f} MB of gradients per step in {packs} "
          f"all-reduce pack(s) of tfdist's {BYTES_PER_PACK // 2**20} MB; their bytes take "
          f"{1000 * bytes_seconds:.2f} ms, the per-step latency "
          f"{1000 * m.links.latency * (cluster.workers - 1):.2f} ms")
  if bytes_seconds >= COMPRESS_ABOVE * pick.step_seconds and bytes_seconds > m.links.latency:
    return line + (": bytes-bound, so send float16 gradients (--compress_gradients, "
                   "tfdist.compress_gradients), which halves the bytes.")
  return line + (": float16 gradients would not help (the bytes are a small share); a larger "
                 "per-replica batch spreads the latency over more examples.")


def _memory(m: Measurements, cluster: Cluster) -> str:
  f = m.footprint
  counted = (f"memory per replica: {f.total / 2**20:.1f} MB (weights {f.weights / 2**20:.1f}, "
             f"gradients {f.gradients / 2**20:.1f}, optimizer slots {f.slots / 2**20:.1f}, "
             + (f"activations {f.activations / 2**20:.1f} MB at batch {m.batch_size})"
                if f.activations is not None else "activations not counted: the model's "
                "layers have no symbolic outputs)"))
  counted += ("; TF measured a peak of " f"{m.peak / 2**20:.1f} MB" if m.peak is not None
              else "; counted, not measured (TF reports no peak memory for CPU devices)")
  if cluster.memory_per_device is None or f.total <= cluster.memory_per_device:
    return counted + "."
  need = f.devices_needed(cluster.memory_per_device)
  limit = f"{cluster.memory_per_device / 2**20:.0f} MB per device"
  if need > cluster.devices_per_worker:
    return (counted + f": more than {limit}, and split over {need} devices it would need more "
            f"than the {cluster.devices_per_worker} a worker has. Use a smaller per-replica "
            "batch (activations shrink with it), mixed_bfloat16 (--precision; half the "
            "activation bytes), or more devices per worker.")
  m_batches = m.micro_batches
  k = cluster.devices_per_worker
  bubble = (k - 1) / (m_batches + k - 1)
  return (counted + f": more than {limit}, so no data-parallel way fits. Split the layers over "
          f"{k} devices (tfdist.placement.place_layers; {need} needed) with {m_batches} "
          f"micro-batches: the expected bubble, the share of time a device waits, is "
          f"(k-1)/(m+k-1) = {bubble:.0%}.")


def _input(m: Measurements, cluster: Cluster) -> str:
  if m.input_share is None:
    return ("input: not measured (the model was timed on random data in memory); pass "
            "--data to measure your pipeline's share of each step.")
  share = m.input_share
  if share < INPUT_BOUND:
    return f"input: {share:.0%} of each step waits for data: the pipeline keeps up."
  scale = ("" if cluster.workers < 2 else
           "; with several workers whose own cores cannot keep up, preprocess on other "
           "machines with TensorFlow's tf.data service (tf.data.experimental.service)")
  return (f"input: {share:.0%} of each step waits for data (highly input-bound): use "
          "tfdist.data.build (parallel map and prefetch with AUTOTUNE), cache what is the "
          f"same every epoch, batch before cheap maps{scale}.")


def decide(m: Measurements, cluster: Cluster, *, learning_rate: float = 1e-2) -> Advice:
  """The recommendation for `cluster` from the measurements `m` (see the module's docstring)."""
  options = sorted(_options(m, cluster), key=lambda o: -o.examples_per_second)
  pick = _pick(options)
  reasons = []
  if pick is None:
    reasons.append("no way considered fits the memory given.")
  else:
    reasons.append(_why(pick, options))
    reasons.append(_batch_and_learning_rate(pick, m.batch_size, learning_rate))
    communication = _communication(m, cluster, pick)
    if communication:
      reasons.append(communication)
  reasons.append(_memory(m, cluster))
  reasons.append(_input(m, cluster))
  one = next((o for o in options if o.name == Name.ONE_DEVICE), None)
  efficiency = None
  if pick is not None and one is not None:
    efficiency = pick.examples_per_second / (one.examples_per_second * pick.replicas)
  multi = next((o for o in options if o.name == Name.MULTI_WORKER_MIRRORED), None)
  if multi is not None and one is not None:
    where = "on this machine" if cluster.colocated else "on separate machines like this one"
    reasons.append(
        f"scaling: {cluster.workers} workers {where} "
        f"{'measure' if multi.source == 'measured here' else 'are predicted at'} "
        f"{multi.examples_per_second:.0f} examples/s, "
        f"{multi.examples_per_second / (one.examples_per_second * multi.replicas):.0%} of "
        f"{multi.replicas} x one device.")
  if cluster.workers > 1:
    reasons.append(PS_NOTE)
  return Advice(pick=pick, options=options, reasons=reasons, efficiency=efficiency)
