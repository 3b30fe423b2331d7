"""The tf.data service's servers beside a local cluster: their commands and restart rule.

A dispatcher and its data workers run as processes
(`python -m tfdist.launch._serve_data_service`, as `tfdist data_service` runs
them on users' own nodes) on the ports of a `DataServiceSpec`. They never finish by themselves. A lost data
worker is restarted alone on its port (TF lets data workers come and go; the
splits it held that epoch are not visited), a lost dispatcher too when it
journals to a work dir; otherwise the job stops, because trainers would wait
for their data forever. `tfdist.launch._supervision` runs them beside the tasks.
"""

import sys
from typing import List, Tuple

from tfdist import cluster as cluster_lib
from tfdist.cluster import _spec as spec_lib
from tfdist.cluster import _data_service as data_service_lib

# Restarts of tf.data service servers, in all, per launch, unless
# --max_restarts allows more: beyond a few, a server that keeps dying is a bug
# to see, not to hide.
DATA_SERVICE_RESTARTS = 3
DISPATCHER = "dispatcher"
DATA_WORKER = "data_worker"


class DataServers:
  """The servers of one `DataServiceSpec`, and how many restarts they have left."""

  def __init__(self, service: data_service_lib.DataServiceSpec, max_restarts: int = 0):
    self.service = service
    self.restarts = max(DATA_SERVICE_RESTARTS, max_restarts)
    self.restarts_left = self.restarts

  def commands(self) -> List[Tuple[cluster_lib.TaskSpec, List[str]]]:
    """(server, command line) for the dispatcher and every data worker."""
    service = self.service
    server = [sys.executable, "-m", "tfdist.launch._serve_data_service"]
    _, port = spec_lib.split_address(service.dispatcher)
    journal = [f"--work_dir={service.work_dir}"] if service.work_dir else []
    servers = [(cluster_lib.TaskSpec(DISPATCHER, 0),
                server + ["--role=dispatcher", f"--port={port}"] + journal)]
    for i, address in enumerate(service.workers):
      servers.append((cluster_lib.TaskSpec(DATA_WORKER, i), server + [
          "--role=worker", f"--port={spec_lib.split_address(address)[1]}",
          f"--dispatcher_address={service.dispatcher}"]))
    return servers

  def environment(self, attempt: int, launcher_pid: int) -> dict:
    """What every task is told of the service; a new job name at each restart.

    The old job has ended, and a job that has ended yields nothing to readers
    that join it again.
    """
    return self.service.environment(f"tfdist-{launcher_pid}-{attempt}")

  def after_exit(self, server: cluster_lib.TaskSpec, code: int) -> Tuple[bool, str]:
    """(restart it, what to report) for a server that exited with `code`."""
    what = f"tf.data service {server} exited with code {code}"
    if server.type == DISPATCHER and not self.service.work_dir:
      return False, (f"{what}; stopping every task: without --data_work_dir its jobs and the "
                     "splits it handed out are lost, and the trainers would wait for data "
                     "forever; pass --data_work_dir to journal them and have it restarted")
    if self.restarts_left <= 0:
      return False, (f"{what}; stopping every task: it was restarted {self.restarts} "
                     "times already, and without it the trainers would wait for data forever")
    self.restarts_left -= 1
    how = ("from its journal in " + self.service.work_dir if server.type == DISPATCHER
           else "(it registers again; the splits it held this epoch are not visited)")
    return True, (f"{what}; restarting it on its port {how} ({self.restarts_left} restarts "
                  "left)")
