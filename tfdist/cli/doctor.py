"""`tfdist doctor`: versions, devices, the Keras x strategy matrix, the cluster.

Exits 1 when TF_CONFIG (or the SLURM environment) is invalid or a task does not
answer, so it can gate a job script: `tfdist doctor && python train.py`.
"""

from absl import flags

_TIMEOUT = flags.DEFINE_float("reachability_timeout", 2.0, "Seconds to wait for each task.",
                              lower_bound=0.1)


def main(argv):
  del argv
  from tfdist import doctor  # Deferred: imports TensorFlow.
  report = doctor.diagnose(reachability_timeout=_TIMEOUT.value)
  print(report)
  return 1 if report.problems else 0
