"""Input beyond one machine's cores: TensorFlow's tf.data service.

When trainers wait for their input and their own cores are busy training,
the pipeline can run elsewhere: a dispatcher hands out the dataset's splits
and data workers on other machines (or cores) run it, sending finished
batches to the trainers. `tfdist launch --data_workers N` starts the
servers beside a cluster (`dispatch_server` and `worker_server`, through
`serve`) and tells every trainer where they are;
`distribute` sends a pipeline through them.

Processing modes (TF's names; tf.data.experimental.service.ShardingPolicy):

- "distributed_epoch" (DYNAMIC): the epoch is split between the data
  workers and the trainers that share the job: every example once per
  epoch. Needs a splittable source (range, from_tensor_slices, list_files).
  If a data worker is lost mid-epoch, the splits it held are not visited
  that epoch (at most once, as TF documents).
- "parallel_epochs" (OFF): every data worker runs the whole dataset in its
  own order; shuffle it.

TF's static policies (FILE, DATA, HINT) need a data worker inside every
trainer process, which separate data workers are not; they are refused.

Example:

    >>> dataset = tfdist.data.service.distribute(tfdist.data.build(...))
    >>> model.fit(dataset, epochs=3)       # under any strategy, in every trainer
"""

import os
import sys
from typing import Mapping, Optional, TextIO, Union

import tensorflow as tf

from tfdist.cluster import _data_service as data_service_lib
from tfdist.internals import tensorflow as tf_internals

_SERVICE = tf.data.experimental.service
PROCESSING_MODES = {
    "distributed_epoch": _SERVICE.ShardingPolicy.DYNAMIC,
    "parallel_epochs": _SERVICE.ShardingPolicy.OFF,
}
# TF's default keeps handing work to a dead worker for 10 minutes; a
# restarted one registers again at once. (A lost one still stalls its epoch:
# docs/known-issues-clusters.md.)
WORKER_TIMEOUT_MS = 30_000
HEARTBEAT_INTERVAL_MS = 1_000


def _policy(processing_mode) -> "tf.data.experimental.service.ShardingPolicy":
  if isinstance(processing_mode, str) and processing_mode in PROCESSING_MODES:
    return PROCESSING_MODES[processing_mode]
  if processing_mode in PROCESSING_MODES.values():
    return processing_mode
  raise ValueError(
      f"`processing_mode` must be one of {list(PROCESSING_MODES)} (or ShardingPolicy.DYNAMIC / "
      "OFF). TF's static sharding (FILE, DATA, HINT) needs a tf.data worker inside every "
      "trainer process; `tfdist launch --data_workers` runs them as separate processes. "
      f"Received: processing_mode={processing_mode!r}")


def distribute(dataset: tf.data.Dataset,
               processing_mode: Union[str, "tf.data.experimental.service.ShardingPolicy"] = (
                   "distributed_epoch"),
               *,
               service: Optional[str] = None,
               job_name: Optional[str] = None) -> tf.data.Dataset:
  """`dataset`, processed by the tf.data service and read from it.

  Args:
    dataset: the pipeline to run on the data workers (batched as the trainer
      wants it; whatever follows `distribute` runs in the trainer).
    processing_mode: "distributed_epoch" or "parallel_epochs" (see module).
    service: the dispatcher, "grpc://host:port". Default: `TFDIST_DATA_SERVICE`,
      which `tfdist launch --data_workers` sets.
    job_name: this dataset's name, the same in every trainer (e.g. "train",
      "validation"). Default: the number of this call in this process, which
      is the same in every trainer when they run the same program. It is put
      after `TFDIST_DATA_SERVICE_JOB`, which the launcher sets anew for each
      start of the cluster (else after "tfdist").

  Raises:
    ValueError: no service given or set, an unknown processing mode, or a
      dataset with Python functions (tf.py_function, tf.numpy_function).

  Under a strategy, TF turns auto-sharding off for a dataset read from a shared
  job: the job already splits the data between the workers.
  """
  policy = _policy(processing_mode)
  python_ops = _python_ops(dataset)
  if python_ops:
    raise ValueError(
        "A dataset sent to the tf.data service runs as a graph in the data workers' "
        "processes, where this process's Python functions do not exist (TF fails later with "
        "'Could not find callback with key=pyfunc_0'). Express the map in TensorFlow ops, "
        "or apply these functions after `distribute`, in the trainer. Received: a dataset "
        f"with {sorted(python_ops)}")
  env_service, env_job = data_service_lib.from_env(os.environ)
  service = service or env_service
  if not service:
    raise ValueError(
        f"No tf.data service to distribute to: run under `tfdist launch --data_workers N` "
        f"(it sets {data_service_lib.SERVICE_ENV}) or pass service='grpc://host:port'. Received: "
        f"service=None and {data_service_lib.SERVICE_ENV} unset")
  # Without a shared name every trainer would get its own job: each would read
  # the whole epoch in "distributed_epoch" mode. Each dataset needs its own
  # name (a job serves one dataset), the same in every trainer: the n-th call
  # of this process, as SPMD trainers make the same calls in the same order.
  global _calls
  _calls += 1
  prefix = env_job or "tfdist"
  job_name = f"{prefix}-{job_name if job_name else _calls}"
  return dataset.apply(_SERVICE.distribute(policy, service, job_name=job_name))


_calls = 0


_PYTHON_OPS = {"EagerPyFunc", "PyFunc", "PyFuncStateless"}


def _python_ops(dataset: tf.data.Dataset) -> set:
  """The Python-function ops (tf.py_function, tf.numpy_function) in `dataset`'s graph."""
  graph = tf_internals.dataset_graph(dataset)
  ops = {node.op for node in graph.node}
  ops.update(node.op for function in graph.library.function for node in function.node_def)
  return ops & _PYTHON_OPS


def dispatch_server(port: int, work_dir: Optional[str] = None) -> "_SERVICE.DispatchServer":
  """A dispatcher on `port`; with `work_dir`, journaled so that a restart resumes its jobs."""
  return _SERVICE.DispatchServer(_SERVICE.DispatcherConfig(
      port=port, work_dir=work_dir, fault_tolerant_mode=bool(work_dir),
      worker_timeout_ms=WORKER_TIMEOUT_MS))


def worker_server(dispatcher: str, port: int,
                  worker_address: Optional[str] = None) -> "_SERVICE.WorkerServer":
  """A data worker on `port` that registers with `dispatcher` ("host:port").

  `worker_address` is how trainers reach it ("host:port"), when that is not
  localhost (another machine, a Kubernetes pod).
  """
  options = {"worker_address": worker_address} if worker_address else {}
  return _SERVICE.WorkerServer(_SERVICE.WorkerConfig(
      dispatcher_address=dispatcher, port=port, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
      **options))


def serve(role: str, port: int = 0, *, dispatcher_address: Optional[str] = None,
          worker_address: Optional[str] = None, work_dir: Optional[str] = None,
          environ: Optional[Mapping[str, str]] = None, out: Optional[TextIO] = None) -> None:
  """Runs one server of the service until the process is stopped; a line when it listens.

  What `tfdist data_service` runs, and the servers a launcher starts beside its
  tasks (`python -m tfdist.launch._serve_data_service`).

  Args:
    role: "dispatcher" or "worker".
    port: the port to listen on (0: any free port).
    dispatcher_address: a worker's dispatcher, "host:port".
    worker_address: how trainers reach a worker ("host:port"), when not
      localhost. None: `TFDIST_NODE_ADDRESS`:its port where a launcher sets it
      (Ray), else localhost.
    work_dir: a dispatcher's journal, so that a restart resumes every job.
    environ: where `TFDIST_NODE_ADDRESS` is read (default os.environ).
    out: where the line goes (default sys.stdout).

  Raises:
    ValueError: an unknown role, or a worker without its dispatcher.
  """
  environ = os.environ if environ is None else environ
  out = out or sys.stdout
  if role == "dispatcher":
    server = dispatch_server(port, work_dir)
    out.write(f"tf.data service dispatcher listening at {server.target}\n")
  elif role == "worker":
    if not dispatcher_address:
      raise ValueError("a worker needs --dispatcher_address=host:port. "
                       "Received: --dispatcher_address unset")
    node = environ.get(data_service_lib.NODE_ADDRESS_ENV)
    if worker_address is None and node:  # TF fills in the port it listens on.
      worker_address = f"{node}:%port%"
    server = worker_server(dispatcher_address, port, worker_address)
    out.write(f"tf.data service worker on port {port or '(any)'}, registered with "
              f"{dispatcher_address}\n")
  else:
    raise ValueError(f"`role` must be 'dispatcher' or 'worker'. Received: role={role!r}")
  out.flush()
  server.join()
