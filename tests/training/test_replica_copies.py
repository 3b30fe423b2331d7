"""tfdist.training._replica_copies: which files of each replica's copies a task keeps.

A model's copies restored with a backup, and copies saved by another number
of replicas, are tested through local SGD in test_local_sgd.py.
"""

import os
import re

import tensorflow as tf

import tfdist
from tfdist.training import _replica_copies as replica_copies


def test_a_save_after_a_resume_from_an_older_backup_keeps_the_last_complete_ones(tmp_path):
  strategy = tfdist.make_strategy("mirrored")
  with strategy.scope():
    variable = tf.Variable(0.0)
  directory = str(tmp_path)
  folder = os.path.join(directory, replica_copies.FOLDER, "worker-0")

  def steps():
    return sorted(int(m.group(1)) for m in
                  (re.match(r"^replicas-(\d+)\.index$", name) for name in os.listdir(folder)) if m)

  def write(step):
    variable.assign(float(step))
    replica_copies.write(strategy, [variable], directory, step)

  for step in (4, 8, 12):
    write(step)
  assert steps() == [8, 12]  # The two newest.
  # The task stopped while step 12's backup was written: the job resumed from step 8's.
  write(10)  # The next save: 12's copies never completed into a backup, and 8's match the last.
  assert steps() == [8, 10]
  assert replica_copies.read(strategy, [variable], directory, 8)
  assert variable.numpy() == 8.0
  write(11)
  assert steps() == [10, 11]
