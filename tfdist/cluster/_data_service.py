"""The tf.data service beside a cluster: where its dispatcher and data workers listen.

TensorFlow's tf.data service moves input processing off the trainers: one
dispatcher hands out the dataset's splits, data workers run the pipeline,
and trainers read finished batches over gRPC
(https://www.tensorflow.org/api_docs/python/tf/data/experimental/service).
It is not part of TF_CONFIG, so a launcher tells the trainers where it is in
two environment variables:

- `TFDIST_DATA_SERVICE`: the dispatcher, e.g. "grpc://localhost:5050";
- `TFDIST_DATA_SERVICE_JOB`: the job name all trainers share. Sharing a job is
  what splits a "distributed_epoch" between trainers; and a job that has
  ended yields nothing to a later reader of the same name, so a launcher
  names each start of the cluster anew.

Nothing here imports TensorFlow (`tfdist.data.service` runs the servers and
reads through them).

Example:

    >>> service = DataServiceSpec.local(workers=2)
    >>> env = service.environment(job_name="tfdist-1")   # for every trainer
"""

import dataclasses
from typing import Dict, Mapping, Optional, Tuple

from tfdist import _variables as variables
from tfdist.cluster import _spec as spec_lib

SERVICE_ENV = variables.DATA_SERVICE
JOB_ENV = variables.DATA_SERVICE_JOB
# The address of the machine a server runs on, where its launcher cannot know
# it in advance (a Ray node): a data worker registers as NODE:PORT.
NODE_ADDRESS_ENV = variables.NODE_ADDRESS
PROTOCOL = "grpc"


@dataclasses.dataclass(frozen=True)
class DataServiceSpec:
  """A dispatcher and its data workers, as "host:port" addresses.

  Attributes:
    dispatcher: the dispatcher's address.
    workers: each data worker's address (its port is fixed, so that a
      restarted worker comes back where the dispatcher knew it).
    work_dir: where the dispatcher journals its state; with it, a restarted
      dispatcher resumes every job where it was (TF's fault-tolerant mode).
  """

  dispatcher: str
  workers: Tuple[str, ...]
  work_dir: Optional[str] = None

  def __post_init__(self):
    if not self.workers:
      raise ValueError("A tf.data service needs at least one data worker, e.g. "
                       f"DataServiceSpec.local(workers=2). Received: workers={self.workers!r}")
    for field, address in [("dispatcher", self.dispatcher)] + [
        (f"workers[{i}]", a) for i, a in enumerate(self.workers)]:
      host, port = spec_lib.split_address(address) if isinstance(address, str) else ("", None)
      if not host or port is None or not port.isdigit():
        raise ValueError(f"`{field}` must be 'host:port', e.g. 'localhost:5050'. "
                         f"Received: {field}={address!r}")

  @classmethod
  def local(cls, workers: int, *, work_dir: Optional[str] = None,
            host: str = "localhost") -> "DataServiceSpec":
    """A dispatcher and `workers` data workers on free loopback ports."""
    check_data_workers(workers)
    dispatcher, *ports = spec_lib.pick_unused_ports(1 + workers)
    return cls(f"{host}:{dispatcher}", tuple(f"{host}:{p}" for p in ports), work_dir)

  @property
  def target(self) -> str:
    """The dispatcher as `tf.data.experimental.service.distribute` takes it."""
    return f"{PROTOCOL}://{self.dispatcher}"

  def environment(self, job_name: str) -> Dict[str, str]:
    """The variables every trainer gets."""
    return {SERVICE_ENV: self.target, JOB_ENV: job_name}

  def __str__(self) -> str:
    journal = f", work_dir={self.work_dir!r}" if self.work_dir else ""
    return (f"tf.data service: dispatcher {self.dispatcher}, "
            f"{len(self.workers)} data worker(s){journal}")


def check_data_workers(count) -> None:
  """Raises ValueError unless `count` is a number of data workers (an integer >= 1)."""
  if isinstance(count, bool) or not isinstance(count, int) or count < 1:
    raise ValueError(f"`data_workers` must be an integer >= 1. Received: {count!r}")


def from_env(environ: Mapping[str, str]) -> Tuple[Optional[str], Optional[str]]:
  """(service target, job name) from a launcher's variables; None where unset."""
  return environ.get(SERVICE_ENV) or None, environ.get(JOB_ENV) or None
