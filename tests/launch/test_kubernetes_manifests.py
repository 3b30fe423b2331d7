"""tfdist.launch.kubernetes._manifests: manifests whose every pod gets a TF_CONFIG consistent with the spec."""

import copy
import io
import json
import os
import shutil
import socket
import subprocess
import sys

import pytest
import yaml

import helpers
from tfdist import launch
from tfdist.launch import Job
from tfdist.launch.kubernetes import _manifests as kubernetes
from tfdist.cluster import ClusterSpec

def _options(**kwargs):
  """Manifest options for job "digits" of image "img:1", and `kwargs`."""
  return kubernetes.ManifestOptions(**{"name": "digits", "image": "img:1", **kwargs})


COMMAND = ["python", "train.py", "--epochs=3"]


def parse(docs):
  return list(yaml.safe_load_all(kubernetes.to_yaml(docs)))


def assert_consistent(configs, spec):
  """Every task of `spec` is exactly one pod, whose TF_CONFIG is that task's."""
  expected = {f"{t.type}:{t.index}": json.loads(spec.tf_config(t.type, t.index))
              for t in spec.tasks()}
  got = {f"{c['task']['type']}:{c['task']['index']}": c for c in configs.values()}
  assert got == expected
  for config in configs.values():  # Each also parses as a valid tfdist spec.
    ClusterSpec.from_tf_config(json.dumps(config))


def test_tfjob_replicas_and_operator_tf_config():
  docs = parse(kubernetes.tfjob(Job(workers=2, ps=1, chief=True), COMMAND,
                                _options(namespace="ml")))
  job, policy = docs
  assert job["kind"] == "TFJob" and job["apiVersion"] == "kubeflow.org/v1"
  assert policy["kind"] == "NetworkPolicy"
  replicas = job["spec"]["tfReplicaSpecs"]
  assert {k: v["replicas"] for k, v in replicas.items()} == {"Chief": 1, "Worker": 2, "PS": 1}
  for replica in replicas.values():
    (container,) = replica["template"]["spec"]["containers"]
    assert container["name"] == "tensorflow"
    assert container["command"] == ["python", "-m", "tfdist", "task", "--", *COMMAND]
  configs = kubernetes.pod_tf_configs(docs)
  assert sorted(configs) == ["digits-chief-0", "digits-ps-0", "digits-worker-0",
                             "digits-worker-1"]
  assert configs["digits-worker-1"]["cluster"]["worker"][1] == "digits-worker-1.ml.svc:2222"
  assert_consistent(configs, kubernetes.tfjob_cluster("digits", workers=2, ps=1, chief=True,
                                                      namespace="ml"))


def test_indexed_jobs_service_and_tf_config():
  docs = parse(kubernetes.indexed_jobs(Job(workers=3, ps=1, chief=True), COMMAND, _options()))
  service, *jobs, policy = docs
  assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
  assert policy["kind"] == "NetworkPolicy"
  assert service["spec"]["publishNotReadyAddresses"] is True
  assert [j["metadata"]["name"] for j in jobs] == ["digits-chief", "digits-worker", "digits-ps"]
  for job in jobs:
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["template"]["spec"]["subdomain"] == "digits"
    assert job["spec"]["template"]["metadata"]["labels"].items() >= \
        service["spec"]["selector"].items()
  configs = kubernetes.pod_tf_configs(docs)
  assert configs["digits-worker-2"]["cluster"]["worker"][2] == \
      "digits-worker-2.digits.default.svc:2222"
  assert_consistent(configs, kubernetes.indexed_cluster("digits", workers=3, ps=1,
                                                        chief=True))


SHOW = "import json, os; print('SEES', json.dumps([os.environ[v] for v in ('TF_CONFIG', 'PYTHONPATH')]))"


@pytest.mark.parametrize("build, pod", [(kubernetes.indexed_jobs, "digits-worker-1"),
                                        (kubernetes.tfjob, "digits-worker-1")])
def test_a_pods_container_really_gets_its_tf_config_and_the_task_site(build, pod):
  """Runs the container's own command line, as the pod would (`python`: this one), for worker 1.

  Before, TFJob and Indexed Job pods ran the command bare: no task site (Keras 3's own
  callbacks racing, no trains-alone line) and no stall watchdog.
  """
  docs = build(Job(workers=2), ["python", "-c", SHOW], _options())
  container = next(d for d in docs if d["kind"] in ("Job", "TFJob"))
  container = (container["spec"]["template"] if container["kind"] == "Job" else
               container["spec"]["tfReplicaSpecs"]["Worker"]["template"])["spec"]["containers"][0]
  env = {e["name"]: e["value"] for e in container["env"]}
  if build is kubernetes.tfjob:  # The training operator writes it.
    env["TF_CONFIG"] = json.dumps(kubernetes.pod_tf_configs(docs)[pod])
  else:  # The Job controller gives each pod its index.
    env["JOB_COMPLETION_INDEX"] = "1"
  command = [sys.executable if arg == "python" else arg for arg in container["command"]]
  out = subprocess.run(command, capture_output=True, text=True, timeout=60,
                       env={"PATH": os.environ["PATH"], "PYTHONPATH": "/image/code", **env})
  assert out.returncode == 0, out.stderr
  tf_config, python_path = json.loads(out.stdout.split("SEES ", 1)[1])
  assert json.loads(tf_config) == kubernetes.pod_tf_configs(docs)[pod]
  assert python_path.split(os.pathsep) == [launch.TASK_SITE_DIR, "/image/code"]


def test_manifests_carry_no_environment():
  text = kubernetes.to_yaml(kubernetes.indexed_jobs(Job(workers=2), COMMAND, _options()))
  for name in ("PATH", "HOME", os.environ.get("HOME", "/root")):
    assert name not in text


@pytest.mark.parametrize("kwargs, match", [
    ({"name": "Digits_1"}, r"`name` must be a DNS label.*Received: 'Digits_1'"),
    ({"image": ""}, r"`image` is empty"),
    ({"command": "python train.py"}, r"`command` must be a non-empty list"),
    ({"workers": 0}, r"`workers` must be an integer >= 1. Received: workers=0"),
    ({"run_as_user": 0}, r"`run_as_user` must be a user id >= 1 .*Received: run_as_user=0$"),
])
def test_errors(kwargs, match):
  args = {"name": "digits", "image": "img:1", "command": COMMAND, "workers": 2, **kwargs}
  with pytest.raises(ValueError, match=match):
    kubernetes.indexed_jobs(Job(workers=args.pop("workers")), args.pop("command"),
                            kubernetes.ManifestOptions(**args))


@pytest.mark.parametrize("kind, path, args", [
    ("tfjob", "launch/kubernetes/tfjob.yaml",
     ["--chief", "--workers=2", "--ps=1", "--", "python", "strategies/parameter_server.py"]),
    ("indexed", "launch/kubernetes/indexed-jobs.yaml",
     ["--workers=2", "--", "python", "strategies/multi_worker_mirrored.py"]),
])
def test_cli_output_matches_the_committed_examples(kind, path, args):
  result = helpers.run(helpers.tfdist_cli(
      "launch", f"--kubernetes={kind}", "--name=digits",
      "--image=registry.example.com/tfdist:0.1", *args), timeout=60)
  assert result.returncode == 0, result.stdout
  with open(os.path.join(helpers.REPO, path)) as f:
    assert result.stdout == f.read()


# Indexed completion mode is GA from Kubernetes 1.24; the oldest schema the
# validator ships is 1.25's, and its newest is checked too.
KUBERNETES_VERSIONS = ("1.25", "latest")


@pytest.mark.parametrize("ps, chief", [(0, False), (1, True)])
def test_indexed_jobs_are_valid_kubernetes(ps, chief):
  import kubernetes_validate
  docs = parse(kubernetes.indexed_jobs(Job(workers=2, ps=ps, chief=chief), COMMAND, _options()))
  for version in KUBERNETES_VERSIONS:
    version = kubernetes_validate.latest_version() if version == "latest" else version
    for doc in docs:  # Strict: an unknown field is an error too.
      kubernetes_validate.validate(doc, version, strict=True)
  broken = dict(docs[1], spec=dict(docs[1]["spec"], backofLimit=3))
  with pytest.raises(kubernetes_validate.ValidationError):
    kubernetes_validate.validate(broken, "1.25", strict=True)


def _unknown_fields(data, model, path="") -> list:
  """Fields of `data` that Kubeflow's (or Kubernetes') generated API model does not have."""
  import kubernetes.client.models as k8s
  from kubeflow.training import models as kubeflow
  names = {json_name: attribute for attribute, json_name in model.attribute_map.items()}
  unknown = []
  for key, value in data.items():
    if key not in names:
      unknown.append(f"{path}.{key}")
      continue
    kind = model.openapi_types[names[key]]
    inner = kind[5:-1] if kind.startswith("list[") else kind
    inner = inner.split(", ")[1][:-1] if inner.startswith("dict(") else inner
    cls = getattr(kubeflow, inner, None) or getattr(k8s, inner, None)
    if cls is None:
      continue  # str, int, bool, object
    for item in (value if kind.startswith("list[") else
                 value.values() if kind.startswith("dict(") else [value]):
      unknown += _unknown_fields(item, cls, f"{path}.{key}")
  return unknown


def test_tfjob_matches_kubeflow_training_api():
  from kubeflow.training import models as kubeflow
  doc, _ = parse(kubernetes.tfjob(Job(workers=2, ps=1, chief=True), COMMAND, _options()))
  assert _unknown_fields(doc, kubeflow.KubeflowOrgV1TFJob) == []
  assert _unknown_fields({"spec": {"runPolicy": {"cleanUpPolicy": "x"}}},
                         kubeflow.KubeflowOrgV1TFJob) == [".spec.runPolicy.cleanUpPolicy"]
  policies = {name: spec["restartPolicy"] for name, spec in doc["spec"]["tfReplicaSpecs"].items()}
  assert set(policies.values()) <= {"Always", "OnFailure", "Never", "ExitCode"}


@pytest.mark.parametrize("build", [kubernetes.tfjob, kubernetes.indexed_jobs])
def test_restart_policies_follow_the_launchers_model(build):
  # Before: TFJob ps tasks never restarted while a restarted chief waited for
  # them, and Indexed Jobs failed on the first pod failure (backoffLimit 0).
  def policies(**counts):
    docs = parse(build(Job(**counts), COMMAND,
                       _options()))
    if docs[0]["kind"] == "TFJob":
      return {name.lower(): spec["restartPolicy"]
              for name, spec in docs[0]["spec"]["tfReplicaSpecs"].items()}
    return {doc["metadata"]["name"].split("-", 1)[1]: (
        doc["spec"]["template"]["spec"]["restartPolicy"], doc["spec"]["backoffLimit"])
        for doc in docs if doc["kind"] == "Job"}

  collective = policies(workers=2)
  parameter_servers = policies(workers=2, ps=1, chief=True)
  if build is kubernetes.tfjob:
    assert collective == {"worker": "OnFailure"}
    assert parameter_servers == {"chief": "Never", "worker": "OnFailure", "ps": "Never"}
  else:
    assert collective == {"worker": ("OnFailure", kubernetes.BACKOFF_LIMIT)}
    assert parameter_servers == {"chief": ("Never", 0), "worker": ("OnFailure", 6),
                                 "ps": ("Never", 0)}


def test_tasks_wait_minutes_for_their_peers():
  for docs in (kubernetes.tfjob(Job(workers=2), COMMAND, _options()),
               kubernetes.indexed_jobs(Job(workers=2), COMMAND, _options())):
    text = kubernetes.to_yaml(docs)
    assert "name: TFDIST_PREFLIGHT_TIMEOUT\n" in text and "value: '600'" in text


@pytest.mark.parametrize("build", [kubernetes.indexed_jobs, kubernetes.tfjob])
def test_data_workers_add_a_tf_data_service_the_trainers_are_told_of(build):
  docs = parse(build(Job(workers=2, data_workers=3), COMMAND, _options(data_journal=True)))
  sets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "StatefulSet"}
  assert {n: s["spec"]["replicas"] for n, s in sets.items()} == {
      "digits-data-dispatcher": 1, "digits-data-worker": 3}
  service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] ==
                 "digits-data")
  for s in sets.values():
    assert s["spec"]["serviceName"] == "digits-data"
    assert s["spec"]["template"]["metadata"]["labels"].items() >= \
        service["spec"]["selector"].items()
  # Pod <statefulset>-<i> resolves as <pod>.<service>: the address trainers get.
  expected = "grpc://digits-data-dispatcher-0.digits-data.default.svc:5050"
  trainers = [c for d in docs if d["kind"] in ("Job", "TFJob")
              for c in _containers(d)]
  assert trainers
  for container in trainers:
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["TFDIST_DATA_SERVICE"] == expected and env["TFDIST_DATA_SERVICE_JOB"] == "digits"
  dispatcher = sets["digits-data-dispatcher"]["spec"]["template"]["spec"]
  assert "--work_dir=/var/run/tfdist-data-journal" in dispatcher["containers"][0]["command"]
  assert dispatcher["volumes"] == [{"name": "journal", "emptyDir": {}},
                                   {"name": "tmp", "emptyDir": {}}]
  if build is kubernetes.indexed_jobs:
    import kubernetes_validate
    for version in KUBERNETES_VERSIONS:
      version = kubernetes_validate.latest_version() if version == "latest" else version
      for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def _containers(doc):
  if doc["kind"] == "TFJob":
    return [c for r in doc["spec"]["tfReplicaSpecs"].values()
            for c in r["template"]["spec"]["containers"]]
  return doc["spec"]["template"]["spec"]["containers"]


def test_a_data_worker_pod_registers_under_its_stable_dns_name():
  """Runs the worker container's command line, with `echo` for python."""
  docs = kubernetes.indexed_jobs(Job(workers=1, data_workers=1), COMMAND, _options())
  worker = next(d for d in docs if d["metadata"]["name"] == "digits-data-worker")
  command = ["echo" if arg == "python" else arg
             for arg in worker["spec"]["template"]["spec"]["containers"][0]["command"]]
  out = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True).stdout
  assert out.split() == [
      "-m", "tfdist", "data_service", "--port=5050", "--role=worker",
      "--dispatcher_address=digits-data-dispatcher-0.digits-data.default.svc:5050",
      f"--worker_address={socket.gethostname()}.digits-data.default.svc:5050"]


# --------------------------------------------------------------- JobSet and Trainer v2

from tfdist.launch.kubernetes import _jobset as jobset  # pylint: disable=wrong-import-position


def _strictly(model, doc):
  """`doc` parsed by a JobSet or Trainer v2 API model, and written back unchanged.

  The models are pydantic (kubeflow-trainer-api): a wrong type is an error, and
  a field they do not know is dropped, so a doc that does not come back equal
  has one.
  """
  assert model.from_dict(doc).to_dict() == doc


@pytest.mark.parametrize("ps, chief, evaluator", [(0, False, False), (1, True, True)])
def test_jobset_and_trainjob_are_valid_against_their_api_models_and_kubernetes(
    ps, chief, evaluator):
  import kubernetes_validate
  from kubeflow_trainer_api import models
  job = Job(workers=2, ps=ps, chief=chief, evaluator=evaluator)
  options = _options(max_restarts=3)
  jobset_doc, _ = parse(jobset.jobset(job, COMMAND, options))
  _strictly(models.JobsetV1alpha2JobSet, jobset_doc)
  runtime, trainjob, _ = parse(jobset.trainjob(job, COMMAND, options))
  _strictly(models.TrainerV1alpha1ClusterTrainingRuntime, runtime)
  _strictly(models.TrainerV1alpha1TrainJob, trainjob)
  # Every Job template is a valid batch/v1 Job for Kubernetes itself, strictly.
  for replicated in (jobset_doc["spec"]["replicatedJobs"] +
                     runtime["spec"]["template"]["spec"]["replicatedJobs"]):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "digits"},
           "spec": replicated["template"]["spec"]}
    for version in KUBERNETES_VERSIONS:
      version = kubernetes_validate.latest_version() if version == "latest" else version
      kubernetes_validate.validate(job, version, strict=True)
  # The check can fail: a misspelt field, or a wrong type.
  with pytest.raises(AssertionError):
    _strictly(models.JobsetV1alpha2JobSet,
              dict(jobset_doc, spec=dict(jobset_doc["spec"], failurPolicy={})))
  with pytest.raises(ValueError):
    models.TrainerV1alpha1TrainJob.from_dict(
        dict(trainjob, spec=dict(trainjob["spec"], trainer={"numNodes": "4"})))


def test_jobset_restarts_the_whole_job_except_for_a_parameter_server_worker():
  def policies(**counts):
    doc, _ = jobset.jobset(Job(**counts), COMMAND,
                           _options(max_restarts=2))
    assert doc["spec"]["failurePolicy"] == {
        "maxRestarts": 2, "rules": [{"name": "restartFromTheBackup", "action": "RestartJobSet"}]}
    return {r["name"]: (r["template"]["spec"]["template"]["spec"]["restartPolicy"],
                        r["template"]["spec"]["backoffLimit"])
            for r in doc["spec"]["replicatedJobs"]}, doc["spec"]["successPolicy"]

  assert policies(workers=2) == ({"worker": ("Never", 0)}, {"operator": "All"})
  assert policies(workers=2, ps=1, chief=True, evaluator=True) == (
      {"chief": ("Never", 0), "worker": ("OnFailure", kubernetes.BACKOFF_LIMIT),
       "ps": ("Never", 0), "evaluator": ("Never", 0)},
      {"operator": "All", "targetReplicatedJobs": ["chief", "evaluator"]})
  runtime, trainjob, _ = jobset.trainjob(Job(workers=2, ps=1, chief=True), COMMAND,
                                         _options(max_restarts=2))
  assert runtime["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] == 2
  assert trainjob["spec"]["trainer"]["numNodes"] == 4
  assert trainjob["spec"]["trainer"]["command"] == ["python", "-m", "tfdist", "task", "--",
                                                    *COMMAND]


@pytest.mark.parametrize("kind, path, args", [
    ("jobset", "launch/kubernetes/jobset.yaml",
     ["--workers=2", "--max_restarts=3", "--", "python", "strategies/multi_worker_mirrored.py"]),
    ("trainjob", "launch/kubernetes/trainjob.yaml",
     ["--chief", "--workers=2", "--ps=1", "--max_restarts=3", "--", "python",
      "strategies/parameter_server.py"]),
])
def test_jobset_and_trainjob_cli_output_matches_the_committed_examples(kind, path, args):
  test_cli_output_matches_the_committed_examples(kind, path, args)


@pytest.mark.parametrize("build", [jobset.jobset, jobset.trainjob])
def test_jobset_and_trainjob_carry_the_tf_data_service_and_tell_every_pod(build):
  docs = parse(build(Job(workers=2, data_workers=2), COMMAND, _options(data_journal=True)))
  sets = {d["metadata"]["name"]: d["spec"]["replicas"] for d in docs if d["kind"] == "StatefulSet"}
  assert sets == {"digits-data-dispatcher": 1, "digits-data-worker": 2}
  for pod in jobset.pods(docs):
    assert pod["env"]["TFDIST_DATA_SERVICE"] == \
        "grpc://digits-data-dispatcher-0.digits-data.default.svc:5050"
    assert pod["env"]["TFDIST_DATA_SERVICE_JOB"] == "digits"


def test_an_evaluator_needs_a_kind_that_has_one():
  from tfdist import launch
  launcher = launch.make_launcher("kubernetes", kind="indexed", image="img:1")
  with pytest.raises(ValueError, match=r"--kubernetes=indexed has no evaluator; use "
                     r"--kubernetes=jobset. Received: evaluator=True$"):
    launcher.launch(COMMAND, launch.Job(workers=2, evaluator=True))


# ------------------------------------------------------------- closed and hardened pods

from tfdist.launch.kubernetes import _pod_security as pod_security  # pylint: disable=wrong-import-position

DIGEST_IMAGE = "registry.example.com/tfdist@sha256:" + "0" * 64


def _controller_jobs(docs):
  """The batch/v1 Jobs the JobSet, Trainer v2 and TFJob controllers would make of `docs`.

  Manifest scanners check only Kubernetes' own kinds, not a custom resource's
  pod template: these Jobs carry those templates, with a TrainJob's
  `runtimePatches` merged into its runtime's as Trainer v2 merges them.
  """
  runtime = next((d for d in docs if d["kind"] == "ClusterTrainingRuntime"), None)
  jobs = []
  for doc in docs:
    name, namespace = doc["metadata"]["name"], doc["metadata"].get("namespace")
    if doc["kind"] == "TFJob":
      specs = {t.lower(): {"template": r["template"]}
               for t, r in doc["spec"]["tfReplicaSpecs"].items()}
    elif doc["kind"] == "JobSet":
      specs = {r["name"]: r["template"]["spec"] for r in doc["spec"]["replicatedJobs"]}
    elif doc["kind"] == "TrainJob":
      specs = {r["name"]: copy.deepcopy(r["template"]["spec"])
               for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
      for patch in doc["spec"]["runtimePatches"]:
        for job in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
          pod, change = specs[job["name"]]["template"], job["template"]["spec"]["template"]
          pod.setdefault("metadata", {}).setdefault("labels", {}).update(
              change["metadata"]["labels"])
          pod["spec"]["securityContext"].update(change.get("spec", {}).get("securityContext", {}))
      for spec in specs.values():
        spec["template"]["spec"]["containers"][0].update(
            image=doc["spec"]["trainer"]["image"], command=doc["spec"]["trainer"]["command"])
    else:
      continue
    jobs += [{"apiVersion": "batch/v1", "kind": "Job",
              "metadata": {"name": f"{name}-{job}", "namespace": namespace}, "spec": spec}
             for job, spec in specs.items()]
  return jobs


def _pod_templates(docs):
  return [d["spec"]["template"] for d in docs + _controller_jobs(docs)
          if d["kind"] in ("Job", "StatefulSet")]


def _every_kind(**kwargs):
  """(kind, data workers, manifests) for every kind, with and without the tf.data service."""
  for kind, build in sorted(kubernetes.MANIFESTS.items()):
    for data_workers in (0, 2):
      yield kind, data_workers, build(
          Job(workers=2, ps=1, chief=True, data_workers=data_workers), COMMAND,
          kubernetes.ManifestOptions(name="digits", data_journal=True, **kwargs))


def test_every_pod_of_every_kind_is_labelled_hardened_and_admitted_only_from_its_job():
  import kubernetes_validate
  ports = {"tfjob": [(2222, None)], "indexed": [(2222, None)], "jobset": [(2222, 2225)],
           "trainjob": [(2222, 2225)]}
  for kind, data_workers, docs in _every_kind(image="img:1", namespace="ml",
                                              run_as_user=10001):
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector == {"tfdist/job": "digits"}
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": selector}}]
    assert [(p["port"], p.get("endPort")) for p in rule["ports"]] == \
        ports[kind] + [(5050, None)] * bool(data_workers), kind
    templates = _pod_templates(docs)
    # Chief, worker and ps (a TrainJob's "node" is all three); the tf.data servers.
    assert len(templates) == (1 if kind == "trainjob" else 3) + 2 * bool(data_workers), kind
    for template in templates:
      assert template["metadata"]["labels"].items() >= selector.items(), kind
      pod = template["spec"]
      assert pod["automountServiceAccountToken"] is False
      assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 10001,
                                        "seccompProfile": {"type": "RuntimeDefault"}}, kind
      assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]
      for container in pod["containers"]:
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "privileged": False, "readOnlyRootFilesystem": True}
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    for version in KUBERNETES_VERSIONS:
      version = kubernetes_validate.latest_version() if version == "latest" else version
      kubernetes_validate.validate(policy, version, strict=True)
  # Without run_as_user the image's USER stays; without the policy, nothing admits.
  for kind, _, docs in _every_kind(image="img:1", network_policy=False):
    assert "NetworkPolicy" not in [d["kind"] for d in docs], kind
    for template in _pod_templates(docs):
      assert "runAsUser" not in template["spec"]["securityContext"], kind


def _checkov():
  """checkov's executable: CHECKOV, on PATH, or where `make install` puts it (its own venv)."""
  for candidate in (os.environ.get("CHECKOV"), shutil.which("checkov"),
                    os.path.join(sys.prefix, "checkov", "bin", "checkov")):
    if candidate and os.access(candidate, os.X_OK):
      return candidate
  pytest.skip("checkov is not installed: `make install` puts it in .venv/checkov")


@pytest.mark.slow
def test_checkov_finds_nothing_in_any_kind_but_what_its_config_skips(tmp_path):
  """One checkov run, as in CI, over every kind's printed YAML and a broken control."""
  from tfdist import launch
  for kind, data_workers, _ in _every_kind(image=DIGEST_IMAGE):
    printed = io.StringIO()
    launcher = launch.make_launcher(
        "kubernetes", launch.LaunchOptions(output=printed, data_work_dir="journal"), kind=kind,
        image=DIGEST_IMAGE, name="digits", namespace="ml", run_as_user=10001)
    launcher.launch(COMMAND, launch.Job(workers=2, ps=1, chief=True,
                                        data_workers=data_workers))
    docs = list(yaml.safe_load_all(printed.getvalue()))
    policy = [d for d in docs if d["kind"] == "NetworkPolicy"]
    (tmp_path / f"{kind}-{data_workers}.yaml").write_text(printed.getvalue())
    if _controller_jobs(docs):
      (tmp_path / f"{kind}-{data_workers}-pods.yaml").write_text(
          kubernetes.to_yaml(_controller_jobs(docs) + policy))
  # The control: no policy, and a container without its securityContext.
  control = kubernetes.indexed_jobs(
      Job(workers=1), COMMAND,
      _options(name="broken", image=DIGEST_IMAGE, namespace="ml", run_as_user=10001,
               network_policy=False))
  del control[1]["spec"]["template"]["spec"]["containers"][0]["securityContext"]
  (tmp_path / "control.yaml").write_text(kubernetes.to_yaml(control))
  # Offline: no policies to download, no update check.
  result = helpers.run([_checkov(), "--config-file", os.path.join(
      helpers.REPO, "launch", "kubernetes", "checkov.yaml"), "--directory", str(tmp_path),
      "--output", "json", "--output-file-path", str(tmp_path / "report"), "--skip-download"],
      timeout=300, env={"CKV_SKIP_PACKAGE_UPDATE_CHECK": "true"})
  assert result.returncode == 1, result.stdout[-3000:]  # The control's failures.
  report = json.loads((tmp_path / "report" / "results_json.json").read_text())
  failed = {(c["file_path"].lstrip("/"), c["check_id"]) for c in report["results"]["failed_checks"]}
  assert {f for f, _ in failed} == {"control.yaml"}, sorted(failed)
  assert {"CKV2_K8S_6", "CKV_K8S_20", "CKV_K8S_28"} <= {c for _, c in failed}, sorted(failed)
  # It did check every kind's pods: the custom resources' through their Jobs.
  checked = {(c["file_path"].lstrip("/"), c["resource"].split(".")[0])
             for c in report["results"]["passed_checks"]}
  for kind, data_workers, _ in _every_kind(image="img:1"):
    pods = f"{kind}-{data_workers}-pods.yaml" if kind in ("tfjob", "jobset", "trainjob") \
        else f"{kind}-{data_workers}.yaml"
    assert (pods, "Job") in checked, (pods, sorted(checked))
    if data_workers:
      assert (f"{kind}-{data_workers}.yaml", "StatefulSet") in checked
  assert report["summary"]["parsing_errors"] == 0


def test_network_policy_none_warns_and_run_as_user_reaches_the_pods():
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--kubernetes=jobset", "--name=digits", "--image=img:1", "--run_as_user=10001",
      "--network_policy=none", "--workers=2", "--data_workers=1", "--", *COMMAND), timeout=60)
  assert result.returncode == 0, result.stdout
  assert "No NetworkPolicy: any pod that reaches the job's pods on port 2222 and up or 5050 " \
      "can run code in them" in result.stdout
  docs = list(yaml.safe_load_all(result.stdout[result.stdout.index("apiVersion"):]))
  assert "NetworkPolicy" not in [d["kind"] for d in docs]
  for template in _pod_templates(docs):
    assert template["spec"]["securityContext"]["runAsUser"] == 10001
