"""tfdist.launch.notebook_launch: from a real Jupyter kernel, as a user's cell runs it."""

import importlib.util
import io
import os
import re
import signal
import sys

import nbformat
import pytest
from nbclient import NotebookClient

import helpers
from tfdist import launch

TRAIN_CELL = '''
import tfdist

def train():
    import tfdist
    strategy = tfdist.make_strategy("multi_worker_mirrored")
    import numpy as np
    from tfdist import keras
    x = np.random.default_rng(0).random((64, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    history = model.fit(x, y, batch_size=16, epochs=3, verbose=0)
    print("LOSSES", [round(l, 6) for l in history.history["loss"]])

tfdist.launch.notebook_launch(train, workers=2, timeout=240)
'''


@pytest.mark.slow
def test_a_notebook_cell_trains_a_two_worker_cluster():
  notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(TRAIN_CELL)])
  env_before = dict(os.environ)
  os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
  try:
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": helpers.REPO}}).execute()
  finally:
    os.environ.clear()
    os.environ.update(env_before)
  text = "".join(o.get("text", "") for o in notebook.cells[0].outputs)
  losses = dict(re.findall(r"\[(worker:\d)\] LOSSES (.*)", text))
  assert set(losses) == {"worker:0", "worker:1"}, text[-3000:]
  assert losses["worker:0"] == losses["worker:1"]


def test_a_failing_task_raises_in_the_cell():
  def crash():
    import sys
    print("about to fail")
    sys.exit(5)
  with pytest.raises(launch.LaunchError, match=r"ended with exit code 5.*Received: exit code 5"):
    launch.notebook_launch(crash, workers=2, output=open(os.devnull, "w"))


def test_parameter_servers_without_a_chief_get_one(capsys):
  # Before: notebook_launch(fn, ps=1) returned at once and ran nothing.
  def task():
    import json, os, time
    if json.loads(os.environ["TF_CONFIG"])["task"]["type"] == "chief":
      print("chief ran")
      return {"ran on": "chief:0"}
    time.sleep(600)
  # What the function returns on the chief comes back to the cell.
  assert launch.notebook_launch(task, workers=1, ps=1, timeout=60) == {"ran on": "chief:0"}
  out = capsys.readouterr().out
  assert "added one (chief + 1 worker(s) + 1 ps)" in out
  assert "[chief:0] chief ran" in out
  assert "TFDIST_RESULT" not in out


def test_a_forged_result_line_loads_nothing_and_the_real_value_comes_back(tmp_path):
  """A task that prints text it does not control cannot make the caller unpickle it."""
  marker = tmp_path / "unpickled"
  cell = tmp_path / "cell.py"  # A function's source travels, so the marker's path is a literal.
  cell.write_text(f"""
def forger():
  import base64, pickle
  class Payload:  # Unpickling it opens (creates) the marker file.
    def __reduce__(self):
      return (open, ({str(marker)!r}, "w"))
  print("TFDIST_RESULT", base64.b64encode(pickle.dumps(Payload())).decode(), flush=True)
  # The function's source is not in any task's command line (`ps` shows it to every user).
  return {{"real": 42, "source in argv": "def forger" in open("/proc/self/cmdline").read()}}
""")
  module_spec = importlib.util.spec_from_file_location("cell", cell)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  out = io.StringIO()
  assert launch.notebook_launch(module.forger, workers=1, timeout=60, output=out) == {
      "real": 42, "source in argv": False}
  assert not marker.exists()
  assert "[worker:0] TFDIST_RESULT " in out.getvalue()  # Passed on as text.


def test_rejects_what_is_not_a_function_or_path():
  with pytest.raises(TypeError, match=r"takes a function or a script path. Received: int"):
    launch.notebook_launch(3)


def test_interrupt_stops_every_task(tmp_path):
  """What the kernel's interrupt does: SIGINT to the process running the cell."""
  pids = tmp_path / "pids"
  pids.mkdir()
  script = tmp_path / "cell.py"
  script.write_text(f"""
import os, sys, time
from tfdist import launch
def sleeper():
    import os, time
    open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
    time.sleep(600)
try:
    launch.notebook_launch(sleeper, workers=2)
except launch.LaunchError as e:
    print("STOPPED", e, flush=True)
""")
  with helpers.spawned([sys.executable, str(script)]) as process:
    helpers.wait_for_files(pids, 2, seconds=60)
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=60)
  assert "received SIGINT; stopping every task" in out
  assert "STOPPED" in out and "exit code 130" in out
  assert len(os.listdir(pids)) == 2
  for pid in map(int, os.listdir(pids)):
    with pytest.raises(ProcessLookupError):
      os.kill(pid, 0)


@pytest.mark.slow
def test_parameter_server_script_from_a_cell():
  import io
  out = io.StringIO()
  launch.notebook_launch(f"{helpers.REPO}/strategies/parameter_server.py", chief=True,
                         workers=2, ps=1, timeout=240, output=out)
  text = out.getvalue()
  assert re.search(r"\[chief:0\] test accuracy: 0\.[6-9]", text), text[-3000:]
  assert "[ps:0] tfdist: serving as ps:0" in text
