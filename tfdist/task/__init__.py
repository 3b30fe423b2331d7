"""The task side: what runs inside each task a launcher starts.

- `progress`: the task's training progress, which the launcher's stall
  watchdog reads (`tfdist.training.step_done` in a custom loop);
- `_step_times`: each task's step times and input waits, and the straggler
  named, read live from the progress rows; `_profile_summary` reads the same
  from `tfdist launch --profile`'s traces;
- `_keras`, `_imports` and `site/`: which Keras a task trains with, for scripts
  that never import tfdist (`site/sitecustomize.py` is first on every task's
  PYTHONPATH);
- `_trains_alone`: a task that would train alone under a multi-worker cluster
  is told so;
- `_notebook`, `_result_channel`: a function run as a task, and how its return
  value comes back to the launcher.

The launchers (`tfdist.launch`) set up each task from outside; nothing here
imports them. Importing this package loads no TensorFlow.
"""

from tfdist.task import progress

__all__ = ["progress"]
