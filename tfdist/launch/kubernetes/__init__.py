"""The Kubernetes backend: a job's manifests for `kubectl apply -f -` (`--kubernetes=KIND`).

`_manifests` writes TFJob and Indexed Job manifests and holds the kinds'
registry (`KubernetesLauncher`), `_jobset` the JobSet and Kubeflow Trainer v2
TrainJob ones, and `_pod_security` what closes and hardens every kind's pods.
"""

from tfdist.launch.kubernetes._manifests import KubernetesLauncher

__all__ = ["KubernetesLauncher"]
