"""tfdist.launch.kubernetes._pod_security: the restricted profile on a pod, and a same-job NetworkPolicy."""

import re

import pytest

from tfdist.launch.kubernetes import _pod_security as pod_security


def test_harden_keeps_the_pods_own_volumes_and_mounts_and_adds_scratch():
  pod = {"containers": [{"name": "a", "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                        {"name": "b"}],
         "volumes": [{"name": "data", "emptyDir": {}}]}
  assert pod_security.harden(pod) is pod
  assert pod["volumes"] == [{"name": "data", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}]
  assert [c["volumeMounts"][-1] for c in pod["containers"]] == \
      [{"name": "tmp", "mountPath": "/tmp"}] * 2
  assert pod["containers"][0]["volumeMounts"][0] == {"name": "data", "mountPath": "/data"}
  assert pod["securityContext"] == {"runAsNonRoot": True,
                                    "seccompProfile": {"type": "RuntimeDefault"}}
  assert pod["automountServiceAccountToken"] is False
  assert all(c["securityContext"]["capabilities"] == {"drop": ["ALL"]} for c in pod["containers"])


@pytest.mark.parametrize("run_as_user", [0, -1, True, "10001", 1.5])
def test_run_as_user_must_be_a_user_id_other_than_roots(run_as_user):
  with pytest.raises(ValueError, match=r"^`run_as_user` must be a user id >= 1 \(pods run as "
                     r"non-root\), e\.g\. 10001, or None for the image's own USER\. Received: "
                     rf"run_as_user={re.escape(repr(run_as_user))}$"):
    pod_security.harden({"containers": []}, run_as_user=run_as_user)


def test_network_policy_admits_the_job_on_its_ports_and_nothing_else():
  policy = pod_security.network_policy("mnist", "ml", [(2222, 2222), (5050, 5050), (2300, 2303)])
  assert policy["metadata"] == {"name": "mnist", "namespace": "ml",
                                "labels": {"app.kubernetes.io/managed-by": "tfdist"}}
  assert policy["spec"] == {
      "podSelector": {"matchLabels": {"tfdist/job": "mnist"}},
      "policyTypes": ["Ingress"],
      "ingress": [{"from": [{"podSelector": {"matchLabels": {"tfdist/job": "mnist"}}}],
                   "ports": [{"protocol": "TCP", "port": 2222},
                             {"protocol": "TCP", "port": 5050},
                             {"protocol": "TCP", "port": 2300, "endPort": 2303}]}]}
