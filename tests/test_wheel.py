"""The wheel carries everything: built, installed outside the source tree, and run from there.

Installed without its dependencies into a folder of its own (they are this
test environment's), and imported from there ahead of the checkout's editable
install; every command runs from a folder outside the source tree.
"""

import json
import os
import re
import subprocess
import sys
import zipfile

import pytest

import helpers

pytestmark = pytest.mark.slow

# Each task prints its task and where its task site (tfdist's sitecustomize) came from.
TASK = ("import json, os, sitecustomize; print('TASK', json.dumps("
        "[json.loads(os.environ['TF_CONFIG'])['task'], sitecustomize.__file__]))")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
  """(the folder the wheel is installed in, the wheel's file names)."""
  out = tmp_path_factory.mktemp("dist")
  # --no-isolation: the build backend (setuptools, wheel) of this environment, offline.
  subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                  str(out), helpers.REPO], check=True, capture_output=True, timeout=300)
  (wheel,) = out.glob("tfdist-*.whl")
  target = tmp_path_factory.mktemp("site")
  subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                  "--target", str(target), str(wheel)], check=True, capture_output=True,
                 timeout=300)
  with zipfile.ZipFile(wheel) as archive:
    return target, archive.namelist()


def test_the_wheel_requires_no_tensorflow_and_its_extras_bring_one(installed):
  # Before: `tensorflow==2.21.*` and `tf-keras==2.21.*` were required, so pip replaced an
  # image's TensorFlow, or installed the `tensorflow` wheel over `tensorflow-cpu`.
  target, _ = installed
  (metadata,) = target.glob("tfdist-*.dist-info/METADATA")
  requires = [line.split(":", 1)[1].strip() for line in metadata.read_text().splitlines()
              if line.startswith("Requires-Dist:")]
  always = [r for r in requires if "extra ==" not in r]
  stack = re.compile(r"^(tensorflow|tf-keras|keras|tensorboard|protobuf)\b")
  assert always and not [r for r in always if stack.match(r)], always
  extra = lambda name: [r.split(";")[0].replace(" ", "") for r in requires
                        if f'extra == "{name}"' in r]
  assert "tensorflow<2.23,>=2.17" in extra("tensorflow"), extra("tensorflow")
  assert "tf-keras<2.23,>=2.17" in extra("tensorflow")
  assert "tensorflow[and-cuda]<2.23,>=2.17" in extra("and-cuda"), extra("and-cuda")
  assert any(r.startswith("tensorflow-datasets") for r in extra("tfds"))
  assert any(r.startswith("ray") for r in extra("ray"))


def test_the_sdist_builds_a_wheel_with_the_same_files(installed, tmp_path):
  _, names = installed
  subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir",
                  str(tmp_path), helpers.REPO], check=True, capture_output=True, timeout=300)
  (sdist,) = tmp_path.glob("tfdist-*.tar.gz")
  target = tmp_path / "site"
  subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                  "--no-build-isolation", "--target", str(target), str(sdist)], check=True,
                 capture_output=True, timeout=300)
  built = sorted(str(p.relative_to(target)) for p in (target / "tfdist").rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts)
  assert built == sorted(n for n in names if n.startswith("tfdist/")), \
      set(built) ^ {n for n in names if n.startswith("tfdist/")}


def _env(target):
  return {**os.environ, "PYTHONPATH": str(target)}


def test_the_wheel_holds_the_package_data(installed):
  _, names = installed
  for path in ("tfdist/launch/slurm/templates/slurm.sbatch", "tfdist/task/site/sitecustomize.py",
               "tfdist/internals/keras.py", "tfdist/training/loop/_runner.py",
               "tfdist/data/digits.npz"):
    assert path in names, path
  assert not any(name.startswith("tests/") for name in names)


def test_launch_runs_two_workers_from_the_installed_wheel(installed, tmp_path):
  target, _ = installed
  where = subprocess.run([sys.executable, "-c", "import tfdist; print(tfdist.__file__)"],
                         capture_output=True, text=True, check=True, cwd=tmp_path,
                         env=_env(target), timeout=60).stdout
  assert where.startswith(str(target)), where
  done = helpers.run([sys.executable, "-m", "tfdist", "launch", "--workers=2", "--",
                      sys.executable, "-c", TASK], timeout=120, env=_env(target), cwd=tmp_path)
  assert done.returncode == 0, done.stdout[-2000:]
  printed = [json.loads(line.split("TASK ", 1)[1]) for line in done.stdout.splitlines()
             if "TASK " in line]
  assert sorted(task["index"] for task, _ in printed) == [0, 1]
  assert all(task["type"] == "worker" for task, _ in printed)
  assert all(site.startswith(str(target)) for _, site in printed), printed


def test_the_slurm_template_renders_from_the_installed_wheel(installed, tmp_path):
  target, _ = installed
  code = ("from tfdist.launch.slurm import _launcher as slurm; print(slurm.TEMPLATE); "
          "print(slurm.render(['python', 'train.py'], ntasks=2, output='out.txt'))")
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        cwd=tmp_path, env=_env(target), timeout=60)
  assert done.returncode == 0, done.stderr[-2000:]
  template, script = done.stdout.split("\n", 1)
  assert template.startswith(str(target))
  assert script.startswith("#!") and "#SBATCH" in script and "python train.py" in script
  assert not re.search(r"\$\{\w+\}", script)  # Every field filled (the shell's own have :-).
