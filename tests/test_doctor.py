"""tfdist._doctor and `tfdist doctor`: a report, and exit 1 on any problem."""

import re
import socket

import pytest

from tfdist import _doctor as doctor
from tfdist.cluster import ClusterSpec

# Version-sensitive: `make test-versions` runs it on the oldest and newest supported TensorFlow too.
pytestmark = pytest.mark.versions


def test_single_process_has_no_problems():
  report = doctor.diagnose({})
  assert not report.problems
  text = str(report)
  # Importing tfdist leaves tf.keras to the environment (here: unset, Keras 3).
  assert re.search(r"tf.keras is +keras3 \(TF_USE_LEGACY_KERAS=\)", text), text
  assert "logical   /device:CPU:0, /device:CPU:1" in text
  assert re.search(r"keras3   multi_worker_mirrored \(2\+ workers\) +works "
                   r"\(tfdist.internals.keras\); raw FAILS: .*keras-team/keras#20585", text)
  assert "keras3   parameter_server" in text and "raw FAILS: Keras 3 cannot fit" in text
  assert "no problems found" in text


def test_the_network_section_says_who_can_reach_the_servers():
  text = str(doctor.diagnose({}))
  # This machine allows user namespaces, as the launcher's own tests show.
  assert re.search(r"tfdist launch tasks +a private loopback-only network: unreachable from "
                   r"other machines", text)
  assert re.search(r"in-process servers +this machine's network, reachable from other "
                   r"machines: TensorFlow binds 0.0.0.0", text)
  # Where tfdist cannot close the ports, it names them and the fix.
  assert re.search(r"tfdist launch --slurm +ports 20000-39999 of the compute nodes .*: "
                   r"reachable from every host that reaches the nodes, without "
                   r"authentication. Fix: run the nodes on a fabric only", text)
  assert re.search(r"tfdist launch --ray +a free port per task.*Fix: keep the Ray nodes on a "
                   r"network only they reach.*RAY_AUTH_MODE=token", text)


def test_a_launch_that_will_be_refused_is_a_problem_with_the_choices(monkeypatch, tmp_path):
  # No `unshare` on PATH, as on a machine without util-linux: no namespace can be made.
  monkeypatch.setenv("PATH", str(tmp_path))
  report = doctor.diagnose({})
  assert re.search(r"tfdist launch tasks +refused: no private network can be made \(install "
                   r"util-linux", str(report))
  assert len(report.problems) == 1 and report.problems[0].startswith(
      "`tfdist launch` and `tfdist train` will refuse to start a local cluster here: no private "
      "network can be made (install util-linux")
  assert "--network=host: TensorFlow's servers then listen on every interface" in \
      report.problems[0]
  assert "no problems found" not in str(report)
  # Chosen already: the host's network is no surprise, so no problem.
  assert not doctor.diagnose({"TFDIST_NETWORK": "host"}).problems


def test_a_namespace_holder_that_fails_is_a_problem_too(monkeypatch, tmp_path):
  # An `unshare` that exists but fails, as under AppArmor's restriction or in a container.
  for tool in ("unshare", "nsenter"):
    path = tmp_path / tool
    path.write_text("#!/bin/sh\necho 'unshare: write failed /proc/self/uid_map: Operation not "
                    "permitted' >&2\nexit 1\n")
    path.chmod(0o755)
  monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
  problems = doctor.diagnose({}).problems
  assert len(problems) == 1 and "could not create a private network namespace" in problems[0]
  assert "Operation not permitted" in problems[0]


def test_invalid_tf_config_is_a_problem():
  report = doctor.diagnose({"TF_CONFIG": '{"cluster": {"worker": ["localhost"]}}'})
  assert report.problems == [
      "TF_CONFIG is invalid: `cluster.worker[0]` is not host:port. Add a port, e.g. "
      "'localhost:2222'. Received: 'localhost'"]


def test_reachability_of_every_task():
  spec = ClusterSpec.local(workers=2)
  listener = socket.socket()
  listener.bind(("127.0.0.1", int(spec.jobs["worker"][1].rsplit(":", 1)[1])))
  listener.listen()
  try:
    report = doctor.diagnose({"TF_CONFIG": spec.tf_config("worker", 0)},
                             reachability_timeout=0.5)
  finally:
    listener.close()
  text = str(report)
  assert re.search(rf"worker:1 +{spec.jobs['worker'][1]} reachable", text)
  assert "worker:0 (this task)" in text
  assert report.problems == []  # This task itself is not serving yet: that is fine.


def test_unreachable_task_is_a_problem():
  spec = ClusterSpec.local(workers=2)
  report = doctor.diagnose({"TF_CONFIG": spec.tf_config("worker", 0)},
                           reachability_timeout=0.5)
  assert report.problems == [f"task worker:1 at {spec.jobs['worker'][1]} does not answer: "
                             "start it, or fix its address."]


@pytest.mark.slow
def test_check_xla_fits_a_step_under_each_local_strategy():
  text = str(doctor.diagnose({}, check_xla=True))
  assert re.search(r"one_device +trains \(measured\)", text)
  assert re.search(r"central_storage +trains \(measured\)", text)
  assert re.search(r"mirrored +refused before the first step \(measured\): mirrored: XLA "
                   r"compiles each replica's step for one device", text)
  assert "jit_compile=True (XLA) x strategy" not in str(doctor.diagnose({}))


def test_the_stack_is_read_from_package_metadata_with_a_line_that_pins_it():
  import tensorflow as tf
  from tfdist import _stack
  text = str(doctor.diagnose({}))
  # `tensorflow` under `make test`, `tensorflow-cpu` under `make test-cpu`: one of them.
  [(flavour, tf_version)] = _stack.tensorflow_distributions()
  assert tf.__version__.startswith(tf_version.split("rc")[0][:4])
  assert re.search(rf"^  tensorflow +{re.escape(tf_version)} \({re.escape(flavour)}\)$", text,
                   re.M), text
  assert re.search(r"^  tf_keras +2\.\d+", text, re.M) and re.search(r"^  keras +3\.", text, re.M)
  pin = re.search(r"^  pin this stack +printf '%s\\n' (.*) > constraints.txt", text, re.M)
  assert pin and f"{flavour.split('[')[0]}=={tf_version}" in pin.group(1).split(), text
  # Every gated use of private code, each applied on the versions the suite runs.
  patches = text.split("patches (")[1].split("\n\n")[0].splitlines()[1:]
  assert len(patches) == 14 and all(" applies (" in line for line in patches), patches


def test_a_patch_not_applied_here_is_a_problem_saying_what_is_lost(monkeypatch):
  # Before: on TensorFlow 2.18 and 2.20 every patch logged that it was not applied, and
  # `tfdist doctor` said "no problems found".
  from tfdist.internals import gates
  monkeypatch.setattr(gates, "installed",
                      lambda: {"TensorFlow": (2, 16), "tf_keras": (2, 21), "Keras": (3, 10)})
  report = doctor.diagnose({})
  text = str(report)
  assert re.search(r"strategy_watch\.strategy_watch +NOT APPLIED: `tfdist launch` cannot tell a "
                   r"task that builds no multi-worker strategy", text), text
  assert re.search(r"tf_keras\.input_replay +applies \(tf_keras 2\.21\)", text), text
  lost = [p for p in report.problems if "is not applied to" in p]
  # The 6 TensorFlow uses and the 6 Keras 3 ones; each problem names its use once.
  assert len(lost) == 12, report.problems
  assert any(p.startswith("tfdist's Keras 3 multi-worker workaround (keras-team/keras#20585) is "
                          "tested with Keras 3.12 to 3.16 and is not applied to Keras 3.10: "
                          "Keras 3 `fit` under multi_worker_mirrored") for p in lost), lost
  assert all(p.count("tfdist's") == 1 for p in lost), lost


def test_a_stack_that_cannot_work_is_named_with_its_fix(monkeypatch):
  from tfdist import _stack
  real = _stack.installed
  monkeypatch.setattr(_stack, "installed",
                      lambda name: "2.15.0" if name == "tf-keras" else real(name))
  problems = doctor.diagnose({}).problems
  assert any(p.startswith("tf_keras 2.15.0 is not the tf_keras of TensorFlow ") and
             "pip install 'tf-keras==2." in p for p in problems), problems
  both = {"tf-keras": "2.21.0", "tf-keras-nightly": "2.22.0.dev2026101709"}
  monkeypatch.setattr(_stack, "installed", lambda name: both.get(name) or real(name))
  problems = doctor.diagnose({}).problems
  assert any(p.startswith("2 tf_keras distributions are installed over one package folder "
                          "(tf-keras, tf-keras-nightly)") for p in problems), problems
  monkeypatch.setattr(_stack, "installed", real)
  monkeypatch.setattr(_stack, "tensorflow_distributions",
                      lambda: [("tensorflow", "2.21.0"), ("tensorflow-cpu", "2.21.0")])
  problems = doctor.diagnose({}).problems
  assert any(p.startswith("2 TensorFlow distributions are installed over one package folder "
                          "(tensorflow, tensorflow-cpu)") for p in problems), problems
  monkeypatch.setattr(_stack, "tensorflow_distributions", lambda: [])
  report = doctor.diagnose({})
  assert any(p.startswith("tfdist needs TensorFlow 2.17 to 2.22, and none is installed: in a "
                          "clone of tfdist, pip install '.[tensorflow]'") for p in report.problems), report.problems
  assert "devices" not in [title for title, _ in report.sections]  # Those need TensorFlow.
  assert not [p for p in report.problems if "tensorflow_datasets" in p], report.problems
  assert "(needs TensorFlow)" in str(report)


def test_tensorflow_datasets_that_does_not_import_is_a_problem_with_the_pin(monkeypatch):
  import types
  # As with TensorFlow 2.17 beside tensorflow-metadata 1.21: the import "works", `core` is gone.
  monkeypatch.setitem(__import__("sys").modules, "tensorflow_datasets",
                      types.ModuleType("tensorflow_datasets"))
  problems = doctor.diagnose({}).problems
  assert any("does not import: AttributeError" in p and
             "pip install 'tensorflow-metadata<1.18' fixes it" in p for p in problems), problems


def test_a_keras_cell_that_rests_on_a_patch_not_applied_here_does_not_say_it_works(monkeypatch):
  # Before: on a Keras the patch was not run with (3.16, before it was) the matrix said
  # Keras 3 multi-worker "works", while the patch it needs was refused.
  from tfdist.internals import gates
  monkeypatch.setattr(gates, "installed",
                      lambda: {"TensorFlow": (2, 21), "tf_keras": (2, 21), "Keras": (3, 17)})
  text = str(doctor.diagnose({}))
  assert re.search(r"keras3   multi_worker_mirrored \(2\+ workers\) +NOT HERE: Keras 3 `fit` "
                   r"under multi_worker_mirrored .* is not applied to Keras 3\.17\)", text), text
  assert re.search(r"keras3   parameter_server +NOT HERE: Keras 3 under parameter servers", text)
  assert re.search(r"tf_keras multi_worker_mirrored \(2\+ workers\) +works", text)


def test_a_kerass_cells_say_not_here_where_it_is_not_installed(monkeypatch):
  # Before: with Keras 3 alone (TensorFlow 2.22 has no tf_keras yet), tf_keras's cells said "works".
  from tfdist.internals import gates
  monkeypatch.setattr(gates, "installed",
                      lambda: {"TensorFlow": (2, 21), "tf_keras": None, "Keras": (3, 15)})
  text = str(doctor.diagnose({}))
  cells = re.findall(r"^  tf_keras ([a-z].+?)  +(.*)$", text, re.M)
  assert len(cells) == 6 and all(cell == "NOT HERE: tf-keras is not installed"
                                 for _, cell in cells), cells
  assert re.search(r"keras3   mirrored +works", text)
  monkeypatch.setattr(gates, "installed",
                      lambda: {"TensorFlow": (2, 21), "tf_keras": (2, 21), "Keras": None})
  text = str(doctor.diagnose({}))
  assert len(re.findall(r"^  keras3 .*NOT HERE: keras is not installed$", text, re.M)) == 6
  assert re.search(r"tf_keras mirrored +works", text)
