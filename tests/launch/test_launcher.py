"""tfdist.launch._launcher: the contract every launcher keeps, and the registry."""

import io

import pytest

from tfdist import launch
from tfdist.launch import _launcher as launcher


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
  launch.make_launcher("kubernetes", image="me/train:1", output=out).launch(
      ["python", "train.py"], launcher.Job(workers=2, ps=1))
  assert "name: tfdist-chief" in out.getvalue()
