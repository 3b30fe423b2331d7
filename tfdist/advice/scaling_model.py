"""How well will a model scale? The α-β model, fed with measurements from this machine.

A synchronous data-parallel step on n replicas costs its compute plus its
communication, latency (α) and bytes (β) as in a ring all-reduce:

    step(n) = compute + latency * (n-1) + gradient_bytes * 2(n-1)/n / busbw

busbw is the bus bandwidth (as nccl-tests define it) of a large all-reduce,
where latency no longer counts. latency is what a training step on 2 workers
pays beyond the bytes: every collective of the step (tf_keras all-reduces the
gradients and then its metrics, each round trip a few hundred µs to 1 ms over
gRPC here) and the wait for the slower worker. A ring's round trips grow as
2(n-1), so the 2-worker latency grows as (n-1). With latency=0 this is the
classic step = compute + bytes * 2(n-1)/n / busbw.

With the per-replica batch fixed (weak scaling), the efficiency is
step(1)/step(n): 1.0 means n replicas give n times the examples per second.

Example:

    >>> predicted = predict(compute_seconds=0.030, gradient_bytes=7e6, busbw=0.3e9,
    ...                     replicas=[2, 4, 8], latency_seconds=0.004)
    >>> print(advice(compute_seconds=0.030, gradient_bytes=7e6, busbw=0.3e9))
"""

import dataclasses
from typing import List, Optional, Sequence


@dataclasses.dataclass(frozen=True)
class Prediction:
  replicas: int
  step_seconds: float
  efficiency: float  # step(1) / step(n) with a fixed per-replica batch.


def communication_seconds(gradient_bytes: float, busbw: float, replicas: int) -> float:
  """Seconds of one ring all-reduce of `gradient_bytes` over `replicas`."""
  if replicas < 1 or busbw <= 0 or gradient_bytes < 0:
    raise ValueError("Need replicas >= 1, busbw > 0 and gradient_bytes >= 0. Received: "
                     f"replicas={replicas}, busbw={busbw}, gradient_bytes={gradient_bytes}")
  return gradient_bytes * 2 * (replicas - 1) / replicas / busbw


def latency_seconds(communication: float, gradient_bytes: float, busbw: float) -> float:
  """The α of the α-β model: a measured 2-worker step's communication time
  (synchronised minus plain step) beyond what moving its gradient bytes at
  `busbw` takes; 0 when the bytes explain it all."""
  return max(0.0, communication - communication_seconds(gradient_bytes, busbw, 2))


def predict(compute_seconds: float, gradient_bytes: float, busbw: float,
            replicas: Sequence[int], latency_seconds: float = 0.0) -> List[Prediction]:
  """The α-β prediction of step time and efficiency for each replica count.

  `latency_seconds`: the per-step latency measured on 2 workers (see above).
  """
  if latency_seconds < 0:
    raise ValueError(f"`latency_seconds` must be >= 0. Received: {latency_seconds}")
  out = []
  for n in replicas:
    step = (compute_seconds + latency_seconds * (n - 1)
            + communication_seconds(gradient_bytes, busbw, n))
    out.append(Prediction(n, step, compute_seconds / step))
  return out


def advice(compute_seconds: float, gradient_bytes: float, busbw: float,
           measured_efficiency: Optional[float] = None, *, compressed: bool = False,
           latency_seconds: float = 0.0) -> str:
  """One or two sentences on what to expect and what to change.

  `compressed`: the gradients already cross in float16, so that is not advised.
  Nor is it when latency, not bytes, dominates the communication.
  """
  bytes_bound = communication_seconds(gradient_bytes, busbw, 2) >= latency_seconds
  fp16 = " or fp16 gradients (compress_gradients)" if bytes_bound and not compressed else ""
  two, limit = (p.efficiency for p in
                predict(compute_seconds, gradient_bytes, busbw, [2, 64], latency_seconds))
  comm = latency_seconds + communication_seconds(gradient_bytes, busbw, 2)
  size = f"gradients are {_size(gradient_bytes)} per step"
  efficiency = two if measured_efficiency is None else measured_efficiency
  if efficiency < 0.5:
    return (f"{size}; synchronising them takes {1000 * comm:.1f} ms against "
            f"{1000 * compute_seconds:.1f} ms of compute: 2 workers will be slower than 1. "
            f"Use a larger per-replica batch (more compute per step){fp16}, "
            "faster links, or stay on one device.")
  if efficiency < 0.9:
    return (f"{size}; 2 workers reach {efficiency:.0%} efficiency and 64 would reach "
            f"{limit:.0%}. A larger per-replica batch{fp16} raises both.")
  return (f"{size}, synchronised in {1000 * comm:.1f} ms against "
          f"{1000 * compute_seconds:.1f} ms of compute: expect {efficiency:.0%} efficiency on "
          f"2 workers and {limit:.0%} on 64, on links as fast as these.")


def _size(nbytes: float) -> str:
  return f"{nbytes / 2**20:.1f} MB" if nbytes >= 2**20 else f"{nbytes / 2**10:.0f} KB"


def plot(path: str, predictions: Sequence[Prediction],
         measured: Sequence[Prediction] = (), title: str = "") -> str:
  """Draws predicted (line) and measured (points) efficiency to a PNG at `path`.

  Raises:
    ImportError: matplotlib is missing, with the install command.
  """
  try:
    import matplotlib
    matplotlib.use("Agg")  # Files only; no display needed.
    from matplotlib import pyplot
  except ImportError as e:
    raise ImportError("Drawing the scaling curve needs matplotlib: pip install matplotlib. "
                      f"Received: {e}") from e
  figure, axes = pyplot.subplots(figsize=(6, 4))
  axes.plot([p.replicas for p in predictions], [p.efficiency for p in predictions], "o-",
            label="predicted (α-β model)")
  if measured:
    axes.plot([p.replicas for p in measured], [p.efficiency for p in measured], "s",
              markersize=10, label="measured here")
  axes.set_xscale("log", base=2)
  axes.set_xlabel("replicas")
  axes.set_ylabel("scaling efficiency")
  axes.set_ylim(0, 1.05)
  axes.grid(True, alpha=0.3)
  axes.legend()
  axes.set_title(title)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  pyplot.close(figure)
  return path
