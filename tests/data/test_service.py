"""tfdist.data.service: pipelines through TF's tf.data service, with real servers in-process."""


import pytest
import tensorflow as tf

from tfdist.data import service


@pytest.fixture
def servers(tmp_path):
  """A journaled dispatcher and two data workers; restartable dispatcher."""
  from tfdist.cluster import pick_unused_ports
  port, *worker_ports = pick_unused_ports(3)
  state = {"dispatcher": service.dispatch_server(port, str(tmp_path))}
  state["workers"] = [service.worker_server(f"localhost:{port}", p) for p in worker_ports]
  state["restart"] = lambda: state.update(dispatcher=service.dispatch_server(port, str(tmp_path)))
  state["target"] = f"grpc://localhost:{port}"
  yield state
  for worker in state["workers"]:
    worker._stop()  # pylint: disable=protected-access
  state["dispatcher"]._stop()  # pylint: disable=protected-access


def _read_together(datasets, between=None):
  """Reads every dataset to its end, one element of each in turn (two trainers)."""
  iterators = [iter(d) for d in datasets]
  seen, steps = [[] for _ in datasets], 0
  while iterators:
    for i, it in list(enumerate(iterators)):
      if it is None:
        continue
      try:
        seen[i].append(int(next(it)))
      except StopIteration:
        iterators[i] = None
    if all(it is None for it in iterators):
      break
    steps += 1
    if between:
      between(steps)
  return seen


@pytest.mark.slow
def test_two_trainers_sharing_a_job_see_every_example_once_per_epoch(servers, monkeypatch):
  monkeypatch.setenv("TFDIST_DATA_SERVICE", servers["target"])
  monkeypatch.setenv("TFDIST_DATA_SERVICE_JOB", "test-once")
  # Each trainer process builds its dataset with the same call: same job name.
  trainers = []
  for _ in range(2):
    monkeypatch.setattr(service, "_calls", 0)
    trainers.append(service.distribute(tf.data.Dataset.range(300)))
  for _ in range(2):  # Each epoch is a new job of the same name, split again.
    a, b = _read_together(trainers)
    assert a and b
    assert sorted(a + b) == list(range(300))


def test_parallel_epochs_gives_the_whole_dataset_per_data_worker(servers):
  dataset = service.distribute(tf.data.Dataset.range(50), "parallel_epochs",
                               service=servers["target"])
  assert sorted(int(x) for x in dataset) == sorted(list(range(50)) * 2)


@pytest.mark.slow
def test_a_restarted_dispatcher_resumes_from_its_journal_mid_epoch(servers):
  trainers = [service.distribute(tf.data.Dataset.range(2000), service=servers["target"],
                                 job_name="journal") for _ in range(2)]
  # Same name in both trainers (one process here, so named, not numbered).

  def restart(step):
    if step == 100:
      servers["dispatcher"]._stop()  # pylint: disable=protected-access
      servers["restart"]()

  a, b = _read_together(trainers, restart)
  # Nothing twice, nothing lost: the journal kept the cursor through the splits.
  assert sorted(a + b) == list(range(2000))


def test_without_a_service_the_error_says_how_to_get_one(monkeypatch):
  monkeypatch.delenv("TFDIST_DATA_SERVICE", raising=False)
  with pytest.raises(ValueError, match=r"tfdist launch --data_workers N.*Received: "
                     r"service=None and TFDIST_DATA_SERVICE unset"):
    service.distribute(tf.data.Dataset.range(3))


@pytest.mark.parametrize("mode", ["one_epoch", tf.data.experimental.service.ShardingPolicy.FILE])
def test_unknown_and_static_processing_modes_are_refused(mode):
  with pytest.raises(ValueError, match=r"`processing_mode` must be one of \['distributed_epoch', "
                     r"'parallel_epochs'\].*static sharding.*Received: processing_mode="):
    service.distribute(tf.data.Dataset.range(3), mode, service="grpc://localhost:1")


def test_python_functions_are_refused_before_the_workers_fail_on_them():
  dataset = tf.data.Dataset.range(3).map(lambda x: tf.py_function(lambda v: v, [x], tf.int64))
  with pytest.raises(ValueError, match=r"Could not find callback.*apply these functions after "
                     r"`distribute`.*Received: a dataset with \['EagerPyFunc'\]"):
    service.distribute(dataset, service="grpc://localhost:1")
