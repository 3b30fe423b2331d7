"""tfdist.launch._threads: tasks launched on one machine share its cores' TensorFlow threads."""

import io
import logging
import re
import sys

import pytest

from tfdist import launch
from tfdist.cluster import ClusterSpec
from tfdist.launch import _threads as threads

# Each task: the variables it got. (TensorFlow sizes its pools by them: a task
# started with both at 1 runs one inter-op thread, named tf_Compute, where it
# ran two on this 2-core machine; not re-measured here, to keep TF out of the test.)
TASK = """
import os
print("THREADS", os.environ.get("TF_NUM_INTRAOP_THREADS"), os.environ.get("TF_NUM_INTEROP_THREADS"),
      flush=True)
"""


def test_each_task_gets_its_share_unless_the_user_set_it():
  two = ClusterSpec.local(workers=2)
  assert threads.thread_variables(two, {}, cores=2) == {
      "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
  assert threads.thread_variables(ClusterSpec.local(workers=3), {}, cores=8) == {
      "TF_NUM_INTRAOP_THREADS": "2", "TF_NUM_INTEROP_THREADS": "2"}
  assert threads.thread_variables(ClusterSpec.local(workers=4), {}, cores=2) == {
      "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
  # The user's choice stays; a one-task job keeps TensorFlow's defaults.
  assert threads.thread_variables(two, {"TF_NUM_INTRAOP_THREADS": "2"}, cores=2) == {
      "TF_NUM_INTEROP_THREADS": "1"}
  assert threads.thread_variables(ClusterSpec.local(workers=1), {}, cores=2) == {}
  # Parameter servers: the intra-op pool only (few inter-op threads hang a worker).
  assert threads.thread_variables(ClusterSpec.local(workers=2, ps=1, chief=True), {},
                                  cores=8) == {"TF_NUM_INTRAOP_THREADS": "2"}


@pytest.mark.slow
def test_two_local_workers_get_their_share_said_once(caplog):
  caplog.set_level(logging.INFO, logger="tfdist")
  out = io.StringIO()
  code = launch.launch_local([sys.executable, "-c", TASK], ClusterSpec.local(workers=2),
                             launch.LaunchOptions(output=out, timeout=120))
  assert code == 0, out.getvalue()[-2000:]
  share = max(1, threads.available_cores() // 2)
  lines = re.findall(r"\[worker:\d\] THREADS (.*)", out.getvalue())
  assert lines == [f"{share} {share}"] * 2, out.getvalue()[-2000:]
  said = [r.getMessage() for r in caplog.records if "share this machine's" in r.getMessage()]
  assert said == [f"tfdist: 2 tasks share this machine's {threads.available_cores()} cores: "
                  f"each gets TF_NUM_INTRAOP_THREADS={share} TF_NUM_INTEROP_THREADS={share} "
                  "(set them in the environment to choose otherwise)"]
