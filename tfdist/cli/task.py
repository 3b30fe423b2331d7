"""`tfdist task -- python train.py`: run a command as this task, with its TF_CONFIG.

For pods and replicas whose platform sets no `TF_CONFIG` (a JobSet or
Kubeflow Trainer v2 pod, a Vertex AI custom container, a SLURM step): the
cluster and this task come from `tfdist.ClusterSpec.from_env()`, and the
command runs with `TF_CONFIG` set and tfdist's task site first on
`PYTHONPATH`. In a job of two or more training tasks it is watched for
stalls: a task whose steps stop dumps its stacks, says where it is, and exits
with code 3. See `tfdist.launch._task`, which does the work.
"""

from tfdist.launch import _task as task

TAKES_ARGUMENTS = True  # The command after '--' (tfdist.cli.main refuses them elsewhere).


def main(argv) -> int:
  return task.run(argv[1:])
