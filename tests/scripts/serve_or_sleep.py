"""A parameter-server cluster whose chief only waits: worker and ps tasks serve for real.

Each task writes its pid to the directory given as argv[1], once it is up.
"""
import json
import os
import sys
import time

task = json.loads(os.environ["TF_CONFIG"])["task"]
name = f"{task['type']}-{task['index']}"
if task["type"] == "chief":
  open(os.path.join(sys.argv[1], name), "w").write(str(os.getpid()))
  print("chief waiting", flush=True)
  time.sleep(600)
else:
  import threading
  import tfdist
  from tfdist.cluster import ClusterSpec, preflight
  address = ClusterSpec.from_env().address(ClusterSpec.from_env().task)

  def write_pid_once_serving():
    while not preflight.reachable(address):
      time.sleep(0.2)
    open(os.path.join(sys.argv[1], name), "w").write(str(os.getpid()))

  # serve() never returns: the pid is written from a thread, once the server listens.
  threading.Thread(target=write_pid_once_serving, daemon=True).start()
  tfdist.make_strategy("parameter_server")
