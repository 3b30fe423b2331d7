"""tfdist.cluster._data_service: where a tf.data service listens, and what trainers are told."""

import pytest

from tfdist.cluster import _data_service as data_service


def test_local_service_has_distinct_free_ports_and_tells_trainers_where_it_is():
  service = data_service.DataServiceSpec.local(workers=2, work_dir="/tmp/journal")
  ports = {a.split(":")[1] for a in (service.dispatcher, *service.workers)}
  assert len(ports) == 3
  env = service.environment("tfdist-7-0")
  assert env == {"TFDIST_DATA_SERVICE": f"grpc://{service.dispatcher}",
                 "TFDIST_DATA_SERVICE_JOB": "tfdist-7-0"}
  assert data_service.from_env(env) == (f"grpc://{service.dispatcher}", "tfdist-7-0")
  assert data_service.from_env({}) == (None, None)
  assert "2 data worker(s), work_dir='/tmp/journal'" in str(service)


@pytest.mark.parametrize("kwargs, match", [
    (dict(dispatcher="localhost:1", workers=()), r"at least one data worker.*Received: workers=\(\)"),
    (dict(dispatcher="localhost", workers=("localhost:2",)),
     r"`dispatcher` must be 'host:port'.*Received: dispatcher='localhost'"),
    (dict(dispatcher="localhost:1", workers=("localhost:x",)),
     r"`workers\[0\]` must be 'host:port'.*Received: workers\[0\]='localhost:x'"),
])
def test_bad_addresses_are_named(kwargs, match):
  with pytest.raises(ValueError, match=match):
    data_service.DataServiceSpec(**kwargs)


@pytest.mark.parametrize("workers", [0, -1, True, "2"])
def test_bad_worker_count(workers):
  with pytest.raises(ValueError, match=rf"`data_workers` must be an integer >= 1. Received: "):
    data_service.DataServiceSpec.local(workers)
