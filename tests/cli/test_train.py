"""`tfdist train` and `tfdist compare`, end to end, as a user runs them."""

import json
import os
import re
import time

import pytest

import helpers

DIGEST = re.compile(r"\[(\w+:\d)\] strategy=(\w+) keras=\w+ replicas=(\d) accuracy=([\d.]+) .* weights=(\w+)")


def results(output):
  return {m.group(1): m.groups()[1:] for m in DIGEST.finditer(output)}


@pytest.mark.slow
def test_multi_worker_mirrored_two_processes_identical_weights(tmp_path):
  result_file = tmp_path / "result.json"
  result = helpers.run(helpers.tfdist_cli(
      "train", "--strategy=multi_worker_mirrored", "--workers=2", "--epochs=4",
      f"--output={result_file}", "--verbose=2"), timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  per_task = results(result.stdout)
  assert set(per_task) == {"worker:0", "worker:1"}
  # Synchronous training: both workers end with bit-identical weights.
  assert per_task["worker:0"] == per_task["worker:1"]
  assert per_task["worker:0"][1] == "2"  # Two replicas in sync.
  written = json.loads(result_file.read_text())
  assert written["weights_digest"] == per_task["worker:0"][3]
  assert written["losses"][-1] < written["losses"][0]
  assert "[worker:0] Epoch 4/4" in result.stdout  # Keras progress per epoch.


def test_each_option_users_choose_by_name_is_a_flag_with_its_values():
  from tfdist import _choices as choices
  result = helpers.run(helpers.tfdist_cli("train", "--help"), timeout=60)
  assert result.returncode == 0, result.stdout[-2000:]
  offered = [option for traits in choices.STRATEGIES for option, _ in traits.choices]
  assert offered == ["cross_device_ops", "communication"]
  for traits in choices.STRATEGIES:
    for option, values in traits.choices:
      assert f"--{option}: <{'|'.join(values)}>" in result.stdout, (traits.name, option)


def test_diloco_s_outer_optimizer_without_sync_every_is_refused_by_name():
  result = helpers.run(helpers.tfdist_cli("train", "--outer_optimizer=nesterov"), timeout=60)
  assert result.returncode == 1, result.stdout[-2000:]
  assert ("flags outer_optimizer=nesterov, outer_learning_rate=0.7, outer_momentum=0.9, "
          "sync_every=0: --outer_optimizer, --outer_learning_rate and --outer_momentum are "
          "DiLoCo's outer step every --sync_every steps, and need --sync_every.") in result.stdout
  # Another of them, alone: refused the same way, not ignored.
  result = helpers.run(helpers.tfdist_cli("train", "--outer_momentum=0.5"), timeout=60)
  assert result.returncode == 1 and "outer_momentum=0.5, sync_every=0" in result.stdout


@pytest.mark.slow
def test_train_rejects_a_bad_flag():
  result = helpers.run(helpers.tfdist_cli("train", "--strategy=mirorred"), timeout=60)
  assert result.returncode != 0
  assert "value should be one of" in result.stdout


USER = os.path.join(helpers.SCRIPTS, "user")


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["mirrored", "multi_worker_mirrored"])
def test_users_own_model_and_data(strategy):
  result = helpers.run(helpers.tfdist_cli(
      "train", f"--strategy={strategy}", "--devices_per_worker=2", "--epochs=4", "--batch_size=32",
      f"--model={USER}/regression_model.py", f"--data={USER}/regression_data.py"), timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  losses = [float(v) for v in re.findall(r"strategy=.* loss=([\d.]+)", result.stdout)]
  assert losses and max(losses) < 0.1  # Learns the linear map; started near 2.
  # Under multi_worker_mirrored, --devices_per_worker is each worker's replicas:
  # 2 workers x 2 devices, a result line from each worker.
  expected = ["2"] if strategy == "mirrored" else ["4", "4"]
  assert re.findall(r"replicas=(\d+)", result.stdout) == expected


@pytest.mark.slow
def test_keras3_user_model_under_parameter_servers(tmp_path):
  # Keras 3's fit cannot run here (keras-team/keras#18624): tfdist.training.loop trains it.
  result = helpers.run(helpers.tfdist_cli(
      "train", "--strategy=parameter_server", "--epochs=6", "--batch_size=32", "--verbose=1",
      f"--model={USER}/regression_model_keras3.py", f"--data={USER}/regression_data.py",
      f"--checkpoint_dir={tmp_path}"), timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  assert "[chief:0] Epoch 6/6 - " in result.stdout
  loss = float(re.search(r"strategy=parameter_server keras=keras3 .* loss=([\d.]+)",
                         result.stdout).group(1))
  assert loss < 0.1  # Learns the linear map; started near 2.
  # The final model is saved once; the loop's backup is gone, as Keras's is.
  assert sorted(os.listdir(tmp_path)) == ["model.keras"]


@pytest.mark.slow
def test_compressed_gradients_train_in_sync():
  result = helpers.run(helpers.tfdist_cli(
      "train", "--strategy=multi_worker_mirrored", "--compress_gradients", "--epochs=8",
      "--batch_size=32", f"--model={USER}/regression_model.py",
      f"--data={USER}/regression_data.py"), timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  done = re.findall(r"\[(worker:\d)\] strategy=.* loss=([\d.]+) .* weights=(\w+)", result.stdout)
  assert sorted(task for task, _, _ in done) == ["worker:0", "worker:1"]
  assert max(float(loss) for _, loss, _ in done) < 0.1
  assert done[0][2] == done[1][2]  # The same float16 sums reach both workers.


@pytest.mark.slow
def test_compressed_gradients_are_refused_under_parameter_servers():
  result = helpers.run(helpers.tfdist_cli(
      "train", "--strategy=parameter_server", "--compress_gradients"), timeout=60)
  assert result.returncode == 2
  assert re.search(r"parameter-server training has none.*Received: strategy='parameter_server', "
                   "compress_gradients=True", result.stdout)


@pytest.mark.parametrize("flag, text, match", [
    ("--model=no/such/file.py", None, r"`--model` names no file.*Received: 'no/such/file.py'"),
    ("--data=no_such_module_xyz", None, r"`--data` names no importable module.*"
     r"Received: 'no_such_module_xyz'"),
    ("--model={path}", "x = 1\n", r"must define a function `model_fn`. Received: "
     r"model_fn=None"),
    ("--data={path}", "import tensorflow as tf\n"
     "def dataset_fn(ctx):\n  return tf.data.Dataset.range(4).batch(2).repeat()\n",
     r"STEPS_PER_EPOCH in a `tfdist train --data` module.*Received: infinite steps"),
])
def test_user_module_errors(tmp_path, flag, text, match):
  path = tmp_path / "user.py"
  if text:
    path.write_text(text)
  result = helpers.run(helpers.tfdist_cli("train", "--epochs=1", flag.format(path=path)),
                       timeout=120)
  assert result.returncode != 0
  assert re.search(match, result.stdout), result.stdout[-2000:]


@pytest.mark.slow
def test_an_in_process_cluster_runs_in_a_private_network():
  # Before: its TF servers listened on every interface of this machine.
  command = helpers.tfdist_cli("train", "--strategy=parameter_server", "--in_process",
                               "--epochs=1", "--verbose=0")
  with helpers.spawned(command) as process:
    for line in process.stdout:
      if "the in-process cluster runs in a private loopback-only network" in line:
        break
    child = _python_child_with_env(process.pid, b"TFDIST_IN_PRIVATE_NETWORK=1")
    assert os.readlink(f"/proc/{child}/ns/net") != os.readlink("/proc/self/ns/net")
    output = process.communicate(timeout=300)[0]
  assert process.returncode == 0, output[-3000:]
  assert "strategy=parameter_server" in output


def _python_child_with_env(root: int, entry: bytes, seconds: float = 60) -> int:
  """The child of `root` with `entry` in its environment, once it runs Python.

  The child starts as nsenter, still in this network, and joins the namespace
  before it execs Python: a CI run read its network in that gap.
  """
  deadline = time.monotonic() + seconds
  while time.monotonic() < deadline:
    for name in filter(str.isdigit, os.listdir("/proc")):
      try:
        with open(f"/proc/{name}/environ", "rb") as f:
          if entry not in f.read().split(b"\0"):
            continue
        with open(f"/proc/{name}/stat") as f:
          parent = int(f.read().rsplit(")", 1)[1].split()[1])
        program = os.path.basename(os.readlink(f"/proc/{name}/exe"))
      except OSError:
        continue
      if parent == root and program.startswith("python"):
        return int(name)
    time.sleep(0.2)
  raise AssertionError(f"no child of {root} with {entry!r}")


@pytest.mark.slow
def test_without_tf_keras_it_trains_keras3_by_default_and_tf_keras_is_refused_with_the_fix():
  # Keras 3 alone, as TensorFlow 2.16+ installs it. Before: both died in a traceback,
  # "No module named 'tf_keras'", from tfdist's own imports.
  env = helpers.without_tf_keras()
  fix = ("needs tf_keras, which is not installed. Install the one of your TensorFlow's minor "
         "version: pip install 'tf-keras==")
  # Each way of asking for tf_keras, or for what only tf_keras runs, named before training.
  for flags, extra_env, what in [
      (["--keras=tf_keras"], {}, "--keras=tf_keras"),
      ([], {"TF_USE_LEGACY_KERAS": "1"}, "TF_USE_LEGACY_KERAS=1"),
      (["--compress_gradients", "--strategy=mirrored"], {}, "compress_gradients=True"),
      (["--evaluator", "--strategy=parameter_server", "--checkpoint_dir=unused"], {},
       "evaluator=True")]:
    refused = helpers.run(helpers.tfdist_cli("train", *flags), timeout=120,
                          env={**env, **extra_env})
    assert refused.returncode == 2, refused.stdout[-3000:]
    assert f"tfdist train: {what}" in refused.stdout and fix in refused.stdout, refused.stdout
    # Keras 3 is the other way only where the Keras was chosen.
    assert ("or use Keras 3" in refused.stdout) == ("keras" in what.lower()), refused.stdout
    assert "Traceback" not in refused.stdout
  trained = helpers.run(helpers.tfdist_cli("train", "--epochs=2", "--verbose=0"), timeout=240,
                        env=env)
  assert trained.returncode == 0, trained.stdout[-3000:]
  assert re.search(r"^strategy=one_device keras=keras3 replicas=1 accuracy=0\.\d+ ",
                   trained.stdout, re.M), trained.stdout[-3000:]
  # Keras 3 warned at every fit that its default shuffle=True is ignored for a dataset.
  assert "shuffle=True" not in trained.stdout
