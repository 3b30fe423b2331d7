"""A custom loop without TensorFlow that reports its steps, for the watchdog.

Usage: python stall_loop.py MARKER_DIR. In its first attempt, worker 1 blocks
forever in `wait_forever` after 3 steps, and worker 0 does 5 steps and waits
for it, as in an all-reduce; a restarted job goes through.
"""

import json
import os
import sys
import threading
import time

import tfdist

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
with open(os.path.join(sys.argv[1], f"attempts-{index}"), "a+") as f:
  f.write("started\n")
  f.seek(0)
  first_attempt = len(f.readlines()) == 1


def wait_forever():
  threading.Event().wait()


for step in range(5):
  if first_attempt and index == 1 and step == 3:
    wait_forever()
  time.sleep(0.05)
  tfdist.training.step_done()
if first_attempt and index == 0:
  time.sleep(600)  # Waits for worker 1, as a collective would.
print("done", flush=True)
