"""tfdist.launch._exposure: the line a launch prints about the ports it leaves open."""

import pytest

from tfdist.launch import _exposure as exposure


def test_ports_read_as_ranges():
  assert exposure.ranges([20043, 20042, 20050]) == "ports 20042-20043, 20050"
  assert exposure.ranges([2222]) == "port 2222"


@pytest.mark.parametrize("launcher", ["slurm", "ray"])
def test_each_launcher_names_the_fix_and_the_guide(launcher):
  line = exposure.warning(launcher, "ports 20042-20043")
  assert line.startswith("TensorFlow's servers of this job listen on ports 20042-20043 of "
                         "every interface of its nodes, without authentication: any host")
  assert f"Fix: {exposure.FIXES[launcher]}. See docs/guides/security.md" in line
  assert "\n" not in line
