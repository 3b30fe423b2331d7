"""Which strategy should I use? Measured here, then one recommendation (`tfdist.advise`).

Measures only what it must, and never trains to convergence:
  1. in one fresh process with K devices (logical CPUs stand in for GPUs on a
     machine without any), the model's memory per replica, then, side by side,
     one device at the batch and at the largest global batch, and with K > 1
     mirrored and central storage over the K devices, and, when the model does
     not fit the memory per device, its layers split over them with
     micro-batches (model parallelism);
  2. with N > 1 workers: a 2-worker cluster on this machine, for the step it
     runs, the per-step latency and the all-reduce bandwidth (unless
     `busbw_gbps` and `latency_ms` give the links of your network);
  3. the default job or `data`: a 2-epoch run's share of time waiting for input.
Then `tfdist.advice.decision` ranks the ways by examples/s, measured or
predicted with the α-β model of `tfdist scale`, and says why. With
`check=True`, every way is timed again in fits `check_longer` times as long,
in the same processes and rounds, and `tfdist.advice._advice_check` holds the
advice to them.

Each measurement runs in a fresh process (a device layout is fixed once
TensorFlow starts), which runs a function of this module and hands its result
back as a JSON file; progress goes to the `tfdist` logger.

Example:

    >>> result = tfdist.advise("my_model.py", workers=4)
    >>> print(result.advice)
    >>> result.advice.pick.name
"""

import dataclasses
import io
import json
import logging
import os
import subprocess
import sys
import time
from typing import Any, Dict, Optional, Sequence

from tfdist import launch as launch_lib
from tfdist import _choices as choices
from tfdist import output
from tfdist._choices import Name
from tfdist.advice import _advice_check as advice_check
from tfdist.advice import decision
from tfdist.advice import memory
from tfdist.cluster import ClusterSpec
from tfdist.task import _result_channel as result_channel

logger = logging.getLogger("tfdist")

# The measuring processes run this, with the task, the options as JSON and the result's path.
_TASK_CODE = ("import sys; from tfdist.advice import _advice as advice; "
              "sys.exit(advice.task_main(sys.argv[1:]))")
TASKS = ("local", "worker", "input")
_NOT_THE_WRITER = object()  # A task whose result another task of its cluster writes.


class MeasurementError(RuntimeError):
  """A measuring process failed; the message ends with its last lines of output."""


@dataclasses.dataclass(frozen=True)
class AdviseOptions:
  """What to measure, for which cluster. `tfdist advise`'s flags are these.

  Attributes:
    model: "cnn" (the default job's), "convnet", "mlp", or a .py file / module
      defining `model_fn()`.
    data: your data (as for `tfdist train --data`), to measure how much of a
      step waits for input; the default job's digits are measured for "cnn".
    batch_size: per replica.
    workers: workers in your cluster.
    devices_per_worker: 0: this machine's GPUs, or with none, one logical CPU
      device per core standing in for them.
    colocated: the workers are processes on this machine; False: separate
      machines like this one.
    memory_per_device_gb: GB of memory per device (None: no limit).
    busbw_gbps, latency_ms: your network's all-reduce bus bandwidth (GB/s)
      and per-step latency on 2 workers (ms); None: measured between 2 local
      workers.
    learning_rate: your one-replica learning rate, to scale.
    micro_batches: model parallelism's micro-batches (0: twice the devices).
    steps: steps per timed fit, at least (more when a fit would take under
      half a second).
    repeats: timed fits per way, interleaved (the fastest counts).
    timeout: seconds allowed per measuring process.
    check: also time every way in fits `check_longer` times as long, and hold
      the advice to them (a benchmark: minutes).
    check_longer: how many times longer the check's fits are.
  """

  model: str = "cnn"
  data: Optional[str] = None
  batch_size: int = 64
  workers: int = 1
  devices_per_worker: int = 0
  colocated: bool = True
  memory_per_device_gb: Optional[float] = None
  busbw_gbps: Optional[float] = None
  latency_ms: Optional[float] = None
  learning_rate: float = 1e-2
  micro_batches: int = 0
  steps: int = 20
  repeats: int = 3
  timeout: float = 300
  check: bool = False
  check_longer: int = 4

  def __post_init__(self):
    for field, low in (("batch_size", 1), ("workers", 1), ("devices_per_worker", 0),
                       ("micro_batches", 0), ("steps", 5), ("repeats", 1),
                       ("check_longer", 1)):
      value = getattr(self, field)
      if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"`{field}` must be an integer >= {low}. Received: {field}={value!r}")
    for field in ("memory_per_device_gb", "busbw_gbps", "latency_ms", "learning_rate",
                  "timeout"):
      value = getattr(self, field)
      if value is not None and not value >= 0:
        raise ValueError(f"`{field}` must be >= 0. Received: {field}={value!r}")


@dataclasses.dataclass(frozen=True)
class AdviseResult:
  """The advice, what it was decided from, and (with `check`) how it held up."""

  advice: decision.Advice
  cluster: decision.Cluster
  measurements: decision.Measurements
  seconds: float  # Measuring and deciding.
  check: Optional[advice_check.Check] = None

  @property
  def text(self) -> str:
    """The recommendation as `tfdist advise` prints it."""
    return str(self.advice)

  def as_dict(self) -> Dict[str, Any]:
    """As JSON-ready data: `tfdist advise --output` writes this."""
    out = {"advice": self.advice.as_dict(), "cluster": dataclasses.asdict(self.cluster),
           "measurements": dataclasses.asdict(self.measurements), "seconds": self.seconds,
           "text": self.text}
    if self.check is not None:
      out["check"] = dataclasses.asdict(self.check)
    return out


def advise(model: str = "cnn", **options) -> AdviseResult:
  """Measures the ways to train `model` here and recommends one (see `AdviseOptions`).

  Raises:
    ValueError: an option is out of range, or `model` or `data` cannot be loaded
      (before anything is measured).
    MeasurementError: a measuring process failed or ran past `timeout`; its
      message ends with that process's last lines.
  """
  return run(AdviseOptions(model=model, **options))


def run(options: AdviseOptions) -> AdviseResult:
  """`advise` for `options`."""
  _model_fn(options)  # A bad model fails here, before any measuring.
  start = time.monotonic()
  devices = options.devices_per_worker or _local_devices()
  cluster = decision.Cluster(
      workers=options.workers, devices_per_worker=devices, colocated=options.colocated,
      memory_per_device=(None if options.memory_per_device_gb is None
                         else options.memory_per_device_gb * 2**30))
  logger.info("measuring %s at batch %d per replica for %d worker(s) x %d device(s)...",
              options.model, options.batch_size, cluster.workers, devices)
  micro_batches = options.micro_batches or 2 * devices
  options = dataclasses.replace(options, micro_batches=micro_batches)
  two_workers = cluster.workers > 1 and (options.busbw_gbps is None or
                                         options.latency_ms is None or options.colocated)
  stages = output.Stages(1 + two_workers + _measures_input(options), start)
  logger.info("  %s", stages.next(f"timing the ways on {devices} device(s), side by side"))
  here = _run_process("local", options, devices)
  footprint = memory.Footprint(**here["footprint"])
  links, two = None, None
  if cluster.workers > 1:
    if two_workers:
      logger.info("  %s", stages.next("timing 2 workers on this machine"))
      two = _run_two_workers(options, devices)
    links = _links(options, two)
  input_share = None
  if _measures_input(options):
    logger.info("  %s", stages.next("timing the input pipeline (2 epochs on one device)"))
    input_share = _input_share(options)
  measurements = decision.Measurements(
      batch_size=options.batch_size, footprint=footprint, step=here["seconds"]["step"],
      links=links, input_share=input_share, micro_batches=micro_batches, peak=here["peak"])
  advice = decision.decide(measurements, cluster, learning_rate=options.learning_rate)
  checked = None
  if options.check:
    checked = _check(advice, cluster, here["seconds"]["check"], two)
  return AdviseResult(advice=advice, cluster=cluster, measurements=measurements,
                      seconds=time.monotonic() - start, check=checked)


def _check(advice, cluster, local_seconds: dict, two: Optional[dict]) -> advice_check.Check:
  """The advice against the longer fits timed beside its own.

  Only what runs here: the workers' way when the cluster is 2 workers on this
  machine, which `run` always measures (a prediction for other clusters has
  nothing here to hold it to).
  """
  measured = {}
  for option in advice.options:
    if option.name == Name.MULTI_WORKER_MIRRORED:
      if cluster.workers != 2 or not cluster.colocated:
        continue
      step = two["synced_check"]
    else:
      step = local_seconds[_way(option.name)]
    measured[option.name] = option.global_batch / step
  return advice_check.check(advice, measured)


def _way(option_name: str) -> str:
  """The way `candidates` timed for an option of the advice."""
  return "model_parallel" if option_name.startswith("model_parallel") else option_name


def _local_devices() -> int:
  """This machine's GPUs, or one logical CPU per core standing in for them."""
  import tensorflow as tf  # Only lists devices: the runtime of this process is not used.
  return len(tf.config.list_physical_devices("GPU")) or (os.cpu_count() or 1)


def _links(options: AdviseOptions, two: Optional[dict]) -> decision.Links:
  """The links of the cluster: the network's given, else measured on `two` local workers."""
  from tfdist.advice import scaling_model
  busbw = options.busbw_gbps * 1e9 if options.busbw_gbps is not None else two["busbw"]
  if options.latency_ms is not None:
    latency = options.latency_ms / 1000
  else:
    latency = scaling_model.latency_seconds(two["synced_tiny"] - two["plain_tiny"],
                                            two["gradient_bytes"], two["busbw"])
  return decision.Links(busbw=busbw, latency=latency,
                        two_workers=None if two is None else two["synced"])


def _measures_input(options: AdviseOptions) -> bool:
  """Whether the input pipeline is timed: with the user's data, or the CNN's digits."""
  return options.data is not None or options.model == "cnn"


def _input_share(options: AdviseOptions) -> Optional[float]:
  """The share of a step waiting for input: a 2-epoch training on one device, or None."""
  try:
    return _run_process("input", options, 1)
  except MeasurementError as e:  # The advice stands without it.
    logger.warning("  input not measured: %s", e)
    return None


# --- the measuring processes --------------------------------------------------

def _command(task: str, options: AdviseOptions, devices: int, path: str) -> Sequence[str]:
  payload = json.dumps({"options": dataclasses.asdict(options), "devices": devices})
  return [sys.executable, "-c", _TASK_CODE, task, payload, path]


def _run_process(task: str, options: AdviseOptions, devices: int) -> Any:
  """`task` in one fresh process; what it wrote."""
  output = []

  def start(path):
    try:
      done = subprocess.run(_command(task, options, devices, path), capture_output=True,
                            text=True, timeout=options.timeout)
      output.append(done.stdout + done.stderr)
      return done.returncode
    except subprocess.TimeoutExpired as e:  # subprocess.run kills the child first.
      stderr = e.stderr or b""  # Bytes even with text=True, on a timeout.
      output.append(stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr)
      return f"timeout after {options.timeout:.0f} s"

  code, result = result_channel.run_for_json(start)
  return _measured(result, code, output[0], f"the {task} measurement on {devices} device(s)")


def _run_two_workers(options: AdviseOptions, devices: int) -> dict:
  """The 2-worker measurement on a local cluster; worker 0's result."""
  output = io.StringIO()
  code, result = result_channel.run_for_json(lambda path: launch_lib.launch_local(
      _command("worker", options, devices, path), ClusterSpec.local(2),
      launch_lib.LaunchOptions(timeout=options.timeout, output=output)))
  return _measured(result, code, output.getvalue(), "the 2-worker measurement")


def _measured(result: Any, code, output: str, what: str) -> Any:
  """`result`, or a MeasurementError with the process's last lines if it wrote none."""
  if result is None:
    tail = "\n".join(line for line in output.splitlines()[-15:])
    raise MeasurementError(f"{what} failed (exit code {code}); its last lines:\n{tail}")
  return result


def task_main(argv: Sequence[str]) -> int:
  """In a measuring process: runs `argv[0]` of `TASKS` and writes its result to `argv[2]`."""
  task, payload, path = argv
  given = json.loads(payload)
  options, devices = AdviseOptions(**given["options"]), given["devices"]
  if devices > 1:
    from tfdist import devices as devices_lib
    devices_lib.split_physical_device(devices)  # Before TensorFlow starts.
  result = {"local": _measure_here, "worker": _measure_worker,
            "input": _measure_input}[task](options, devices)
  if result is not _NOT_THE_WRITER:
    with open(path, "w") as f:
      json.dump(result, f, indent=1)
  return 0


def _model_fn(options: AdviseOptions):
  from tfdist._lab import models
  return models.model_fn(options.model)


def _measure_here(options: AdviseOptions, devices: int) -> dict:
  """The model's memory, then every local way, interleaved."""
  from tfdist.advice import _candidates as candidates
  batch = options.batch_size
  footprint = memory.footprint(candidates.compiled(_model_fn(options)), batch)
  ways = {Name.ONE_DEVICE: (Name.ONE_DEVICE, batch)}
  largest = options.workers * devices
  if largest > 1:
    ways[decision.ONE_DEVICE_LARGE] = (Name.ONE_DEVICE, batch * largest)
  if devices > 1:
    ways.update({name: (name, batch) for name in choices.strategy_names(choices.SINGLE_MACHINE)
                 if name != Name.ONE_DEVICE})
    limit = options.memory_per_device_gb
    if limit is not None and footprint.total > limit * 2**30:
      ways["model_parallel"] = ("model_parallel", batch)
  seconds = candidates.time_ways(_model_fn(options), ways, steps=options.steps,
                                 repeats=options.repeats,
                                 micro_batches=options.micro_batches or 1,
                                 longer=options.check_longer if options.check else 0)
  return {"seconds": seconds, "footprint": footprint.as_dict(), "peak": memory.peak_bytes()}


def _measure_worker(options: AdviseOptions, devices: int):
  """One of 2 workers: the synced step, latency and bandwidth; worker 0 reports."""
  import tfdist
  from tfdist.advice import _candidates as candidates
  from tfdist.advice import scale
  spec = ClusterSpec.from_env()
  strategy = tfdist.make_strategy(Name.MULTI_WORKER_MIRRORED, communication="ring")
  # Unpinned, as `tfdist train` runs workers: each shares this machine's cores.
  # Not less than 50 steps, nor fits shorter than the local ways': a fit's
  # first steps and its end weigh less in a long fit (in one run, the default
  # CNN's 50-step fits measured 4.6 ms a step against 3.8 ms in 200-step ones).
  result = scale.measure_worker(strategy, _model_fn(options), batch_size=options.batch_size,
                                steps=max(50, options.steps), repeats=options.repeats,
                                compress_gradients=False, seed=spec.task.index, raw=False,
                                longer=options.check_longer if options.check else 0,
                                min_fit_seconds=candidates.MIN_FIT_SECONDS)
  return result if spec.task.index == 0 else _NOT_THE_WRITER


def _measure_input(options: AdviseOptions, devices: int) -> Optional[float]:
  """A 2-epoch training on one device: its share of a step waiting for input."""
  from tfdist.training import job
  from tfdist.training import _user_code as user_code
  user = {}
  if options.data is not None:
    module = user_code.load_module(options.data, "data")
    user["dataset_fn"] = user_code.dataset_fn_with_batch(
        user_code.function(module, "dataset_fn", "data"), options.batch_size)
    user["steps_per_epoch"] = getattr(module, "STEPS_PER_EPOCH", None)
    user["model_fn"] = _model_fn(options)
  result = job.train(job.TrainConfig(strategy=Name.ONE_DEVICE, epochs=2,
                                     batch_size=options.batch_size, verbose=0, **user))
  return result.input_bound
