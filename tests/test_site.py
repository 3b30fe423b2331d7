"""tests/site/sitecustomize.py: the suite's processes skip the garbage collection of their exit,
collect first after more new objects, load pyplot on its first use, and hand over to the next
sitecustomize on the path once, also behind a tfdist task's site."""

import os
import subprocess
import sys

from tfdist.task import _keras as task_keras

SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")
# A reference cycle left at exit: Python's last collection finds it and calls its __del__.
CYCLE = ("class Cycle:\n"
         "  def __del__(self):\n"
         "    print('collected', flush=True)\n"
         "cycle = Cycle()\n"
         "cycle.self = cycle\n"
         "del cycle\n"
         "print('exiting', flush=True)\n")


def _python(path, code):
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
  return subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, timeout=60, check=False)


def test_a_cycle_left_at_exit_is_collected_by_python_but_not_in_the_suites_processes():
  alone = _python([], CYCLE)
  assert alone.returncode == 0 and alone.stdout.split() == ["exiting", "collected"], alone.stdout
  suite = _python([SITE], CYCLE)
  assert suite.returncode == 0 and suite.stdout.split() == ["exiting"], suite.stdout


def test_the_next_sitecustomize_runs_once_also_behind_a_tasks_site(tmp_path):
  (tmp_path / "sitecustomize.py").write_text("print('next site', flush=True)\n")
  # As a test's own child has it, and as a task that `tfdist launch` started from a test has it.
  for path in ([SITE, str(tmp_path)], [task_keras.SITE_DIR, SITE, str(tmp_path)]):
    result = _python(path, "print('ran', flush=True)")
    assert result.returncode == 0 and result.stdout.splitlines() == ["next site", "ran"], (
        path, result.stdout)


def test_pyplot_loads_on_its_first_use_and_then_draws():
  code = ("import sys\n"
          "import matplotlib\n"
          "matplotlib.use('Agg')\n"
          "import matplotlib.pyplot as plt\n"
          "print(type(sys.modules['matplotlib.pyplot']).__name__)\n"
          "figure, axes = plt.subplots()\n"
          "axes.plot([0, 1], [1, 0])\n"
          "print(type(sys.modules['matplotlib.pyplot']).__name__, figure.canvas.get_width_height())\n")
  alone = _python([], code)
  assert alone.returncode == 0 and alone.stdout.splitlines()[0] == "module", alone.stdout
  suite = _python([SITE], code)
  assert suite.returncode == 0, suite.stdout
  assert suite.stdout.splitlines() == ["_LazyModule", "module (640, 480)"], suite.stdout


def test_the_first_collection_waits_for_more_new_objects_in_the_suites_processes():
  code = "import gc; print(*gc.get_threshold())"
  alone, suite = _python([], code), _python([SITE], code)
  assert suite.stdout.split() == ["50000", "20", "10"], suite.stdout
  assert alone.stdout.split() != suite.stdout.split(), alone.stdout
