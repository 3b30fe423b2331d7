"""tfdist/__init__.py: lazy public names, no old module paths, modules that reload."""

import importlib
import importlib.resources
import subprocess
import sys

import pytest

import tfdist


def test_old_module_paths_are_gone_and_the_real_modules_reload():
  # Before: a meta-path finder served 11 old paths; importing one left the real
  # module's __spec__ naming the old path, so reload did nothing and
  # importlib.resources.files() raised. (tfdist.serving, once the old path of
  # tfdist.export, is a package again: serving with request batching.)
  for old in ("tfdist.sbatch", "tfdist.preflight", "tfdist.datasets", "tfdist.loop",
              "tfdist.keras3_workarounds", "tfdist.progress", "tfdist.launch._ray",
              "tfdist.launch._slurm", "tfdist.launch._trains_alone"):
    with pytest.raises(ModuleNotFoundError):
      importlib.import_module(old)
  module = importlib.import_module("tfdist.launch.slurm._launcher")
  assert module.__spec__.name == "tfdist.launch.slurm._launcher"
  assert importlib.reload(module) is module
  assert importlib.resources.files("tfdist.launch.slurm").joinpath(
      "templates/slurm.sbatch").is_file()
  assert importlib.resources.files("tfdist.task").joinpath("site/sitecustomize.py").is_file()


def test_public_names_resolve_to_their_modules():
  assert tfdist.Loop is importlib.import_module("tfdist.training.loop").Loop
  assert tfdist.export is importlib.import_module("tfdist.training.saved_model").export
  assert tfdist.training.loop is importlib.import_module("tfdist.training.loop")
  with pytest.raises(AttributeError, match=r"has no attribute 'scaled_learning_rate'"):
    tfdist.scaled_learning_rate  # pylint: disable=pointless-statement
  with pytest.raises(AttributeError, match=r"'tfdist.training' has no attribute 'nothing'"):
    tfdist.training.nothing  # pylint: disable=pointless-statement


def test_importing_tfdist_and_its_training_package_loads_no_tensorflow():
  code = ("import sys, tfdist, tfdist.training, tfdist.internals.keras; "
          "print('tensorflow' in sys.modules, 'keras' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=True).stdout
  assert out.split() == ["False", "False"]


def test_importing_the_advice_and_serving_packages_loads_no_tensorflow():
  # Their __init__s load TensorFlow's modules on first use; the all-reduce family is plain Python.
  code = ("import sys, tfdist.advice, tfdist.serving, tfdist._lab.all_reduce_family; "
          "print('tensorflow' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=True).stdout
  assert out.split() == ["False"]


def test_without_tensorflow_the_first_use_says_what_to_install():
  # TensorFlow is the user's (setup.cfg): `import tfdist` works, the first use names the fix.
  code = ("import sys; sys.modules['tensorflow'] = None; sys.modules['tf_keras'] = None\n"
          "import tfdist\n"
          "for name in ('make_strategy', 'keras'):\n"
          "  try:\n"
          "    getattr(tfdist, name)\n"
          "  except ModuleNotFoundError as e:\n"
          "    print(name, e.name, '|', e)\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=True).stdout.splitlines()
  assert len(out) == 2, out
  assert out[0].startswith("make_strategy tensorflow | tfdist needs TensorFlow 2.17 to 2.22, "
                           "and none is installed: in a clone of tfdist, pip install "
                           "'.[tensorflow]'"), out
  assert out[1].startswith("keras tf_keras | tfdist.keras is tf_keras, which is not installed. "
                           "Install the one of your TensorFlow's minor version"), out
