"""tfdist.launch._launcher: the contract every launcher keeps, and the registry."""

import dataclasses
import io
import os
import sys

import pytest
import yaml

from tfdist import launch
from tfdist.launch import _launcher as launcher
from tfdist.task import _keras as task_keras


def test_every_launcher_is_registered():
  assert launch.available_launchers() == ["kubernetes", "local", "ray", "slurm"]
  assert isinstance(launch.make_launcher("local"), launch.Launcher)


def test_an_unknown_launcher_lists_the_known_ones():
  with pytest.raises(ValueError, match=r"Unknown launcher name. Valid names: \['kubernetes', "
                     r"'local', 'ray', 'slurm'\]\. Received: 'mesos'"):
    launch.make_launcher("mesos")


@pytest.mark.parametrize("kwargs, match", [
    ({"workers": 0}, r"`workers` must be an integer >= 1. Received: workers=0"),
    ({"ps": -1}, r"`ps` must be an integer >= 0. Received: ps=-1"),
    ({"workers": True}, r"Received: workers=True"),
])
def test_job_errors(kwargs, match):
  with pytest.raises(ValueError, match=match):
    launcher.Job(**kwargs)


def test_a_parameter_server_job_gets_a_chief_the_same_way_everywhere():
  job, note = launcher.with_coordinator(launcher.Job(workers=2, ps=1))
  assert job == launcher.Job(workers=2, ps=1, chief=True) and job.num_tasks == 4
  assert "needs a chief" in note and "added one" in note
  unchanged = launcher.Job(workers=2)
  assert launcher.with_coordinator(unchanged) == (unchanged, "")


def test_the_kubernetes_launcher_adds_the_chief_too():
  out = io.StringIO()
  launch.make_launcher("kubernetes", launch.LaunchOptions(output=out), image="me/train:1").launch(
      ["python", "train.py"], launcher.Job(workers=2, ps=1))
  assert "name: tfdist-chief" in out.getvalue()


@pytest.mark.parametrize("options, match", [
    (dict(timeout=-1), r"`timeout` must be a number of seconds >= 0 \(or None\)\. "
                       r"Received: timeout=-1$"),
    (dict(stall_timeout="soon"), r"`stall_timeout` must be a number of seconds >= 0 "
                                 r"\(or None\)\. Received: stall_timeout='soon'$"),
    (dict(grace_period=None), r"`grace_period` must be a number of seconds >= 0\. "
                              r"Received: grace_period=None$"),
    (dict(max_restarts=1.5), r"`max_restarts` must be an integer >= 0\. "
                             r"Received: max_restarts=1.5$"),
    (dict(max_restarts=True), r"Received: max_restarts=True$"),
    (dict(keras="keras2"), r"`keras` must be one of \['tf_keras', 'keras3'\] \(or None\)\. "
                           r"Received: keras='keras2'$"),
    (dict(profile="120-100"), r"Received: '120-100'"),
])
def test_launch_options_name_the_field_and_the_value(options, match):
  with pytest.raises(ValueError, match=match):
    launch.LaunchOptions(**options)


def test_every_backend_takes_the_shared_options_first_and_refuses_another_value():
  options = launch.LaunchOptions(timeout=5, stall_timeout=7, profile="3-4",
                                 trains_alone="error", env={"A": "1"})
  for name in launch.available_launchers():
    extra = {"image": "me/train:1"} if name == "kubernetes" else {}
    assert launch.make_launcher(name, options, **extra).options is options
    with pytest.raises(TypeError, match=r"`options` must be a tfdist.launch.LaunchOptions\. "
                                        r"Received: dict"):
      launch.make_launcher(name, {"timeout": 5}, **extra)


def test_the_tasks_get_the_watch_the_profile_and_the_trains_alone_mode_from_the_options(
    tmp_path):
  options = launch.LaunchOptions(stall_timeout=7.5, profile="3-4", profile_dir="traces",
                                 trains_alone="error", env={"A": "1"})
  # With the tasks' Keras (tf_keras unless asked) and tfdist's task site on PYTHONPATH.
  assert options.environment() == {
      "A": "1", "TFDIST_STALL_TIMEOUT": "7.5", "TFDIST_TRAINS_ALONE": "error",
      "TFDIST_PROFILE": "3-4", "TFDIST_PROFILE_DIR": os.path.abspath("traces"),
      "TF_USE_LEGACY_KERAS": "1", "PYTHONPATH": task_keras.SITE_DIR}
  assert dataclasses.replace(options, keras="keras3").environment()["TF_USE_LEGACY_KERAS"] == "0"
  # A pod's folder stays its own, and a pod gets nothing of this machine's environment.
  assert options.task_variables(profile_dir_here=False)["TFDIST_PROFILE_DIR"] == "traces"
  out = io.StringIO()
  launch.make_launcher("kubernetes", dataclasses.replace(options, output=out),
                       image="me/train:1").launch(["python", "train.py"], launcher.Job(workers=1))
  pod_env = yaml.safe_load_all(out.getvalue())
  values = {e["name"]: e.get("value") for doc in pod_env if doc.get("kind") == "Job"
            for e in doc["spec"]["template"]["spec"]["containers"][0]["env"]}
  assert values["TFDIST_PROFILE_DIR"] == "traces" and values["TFDIST_STALL_TIMEOUT"] == "7.5"
  assert values["A"] == "1" and "PATH" not in values
  # Nothing given: the tasks' base is this process's environment, with nothing added. An
  # empty profile (`--profile=$STEPS` with none) traces nothing, as before the options.
  assert launch.LaunchOptions().environment() == {**os.environ,
                                                  **task_keras.variables(None, os.environ)}
  assert launch.LaunchOptions(profile="").task_variables() == {}


def test_tf_keras_chosen_where_it_is_missing_is_refused_where_the_tasks_run_this_python(
    monkeypatch, tmp_path):
  # Keras 3 alone. The local and SLURM launchers' tasks import this machine's packages:
  # refused before anything starts. Ray's workers and a manifest's pods have their own.
  monkeypatch.setitem(sys.modules, "tf_keras", None)
  started = tmp_path / "started"
  for options, what in [(launch.LaunchOptions(keras="tf_keras"), "keras='tf_keras'"),
                        (launch.LaunchOptions(env={**os.environ, "TF_USE_LEGACY_KERAS": "1"}),
                         "TF_USE_LEGACY_KERAS=1")]:
    for name in ("local", "slurm"):
      quiet = dataclasses.replace(options, output=io.StringIO())
      with pytest.raises(ValueError, match=rf"^{what} needs tf_keras, which is not installed"):
        launch.make_launcher(name, quiet).launch(["touch", str(started)],
                                                 launcher.Job(workers=2))
    assert options.environment()["TF_USE_LEGACY_KERAS"] == "1"  # Not here: not refused.
  assert not started.exists()
  # Where Keras 3 is chosen or left to the default, the same launch runs.
  for options in (launch.LaunchOptions(keras="keras3"), launch.LaunchOptions()):
    assert launch.make_launcher("local", dataclasses.replace(options, output=io.StringIO())
                                ).launch(["touch", str(started)], launcher.Job(workers=1)) == 0
  assert started.exists()


def test_a_launch_error_carries_the_exit_code_tfdist_launch_gives():
  # pylint: disable=import-outside-toplevel
  from tfdist.launch import private_network
  from tfdist.launch.ray import _placement as ray_placement
  from tfdist.launch.slurm import _launcher as slurm_launcher
  codes = {cls.__name__: cls.exit_code for cls in (
      launch.LaunchError, launch.CannotStart, private_network.Unavailable,
      ray_placement.RayUnavailable, slurm_launcher.SlurmError)}
  assert codes == {"LaunchError": 1, "CannotStart": 127, "Unavailable": 2,
                   "RayUnavailable": 2, "SlurmError": 1}
  assert all(issubclass(cls, launch.LaunchError) for cls in (
      launch.CannotStart, private_network.Unavailable, ray_placement.RayUnavailable,
      slurm_launcher.SlurmError))
