"""tfdist.training.checkpoints: saved once by the chief, and resumed after an interruption."""

import json
import os
import re
import signal
import stat
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import helpers
import tfdist
from tfdist.training import checkpoints
from tfdist import keras
from tfdist.training import job


def test_save_model_in_one_process(tmp_path):
  strategy = tfdist.make_strategy("mirrored")
  with strategy.scope():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  path = str(tmp_path / "model.keras")
  assert checkpoints.is_chief(strategy)
  assert checkpoints.save_model(model, path, strategy) == path
  x = np.ones((4, 3), "float32")
  np.testing.assert_allclose(keras.models.load_model(path)(x), model(x), rtol=1e-6)
  assert os.listdir(tmp_path) == ["model.keras"]


@pytest.mark.slow
def test_multi_worker_writes_once(tmp_path):
  ck, tb = tmp_path / "ck", tmp_path / "tb"
  result = helpers.run(helpers.tfdist_cli(
      "train", "--strategy=multi_worker_mirrored", "--epochs=2", "--verbose=0",
      f"--checkpoint_dir={ck}", f"--tensorboard_dir={tb}"), timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
  assert "ck/model.keras" in files
  assert not [f for f in files if "workertemp" in f]  # Other workers' copies are gone.
  assert len([f for f in files if "tfevents" in f]) == 1  # The chief's logs only.
  assert not list((ck / "backup").rglob("*ckpt*"))  # Deleted after success.
  digest = re.search(r"\[worker:0\] .* weights=(\w+)", result.stdout).group(1)
  saved = keras.models.load_model(str(ck / "model.keras"))
  assert job.weights_digest(saved.get_weights()) == digest


@pytest.mark.slow
def test_killed_job_resumes_from_the_last_finished_epoch(tmp_path):
  command = helpers.tfdist_cli(
      "train", "--strategy=multi_worker_mirrored", "--epochs=6", "--verbose=2",
      f"--checkpoint_dir={tmp_path}", f"--output={tmp_path / 'result.json'}")
  first = []
  with helpers.spawned(command) as process:
    for line in process.stdout:  # Kill the whole cluster once epoch 3 has begun.
      first.append(line)
      if line.startswith("[worker:0] Epoch 3/6"):
        os.killpg(process.pid, signal.SIGKILL)
        break
    first.append(process.communicate(timeout=60)[0])
  started = [int(n) for n in re.findall(r"^\[worker:0\] Epoch (\d+)/6", "".join(first), re.M)]
  interrupted = max(started)
  assert interrupted < 6, "the job finished before it could be killed"
  assert list((tmp_path / "backup").rglob("*.index")), "no backup was written"
  resumed = helpers.run(command, timeout=300)
  assert resumed.returncode == 0, resumed.stdout[-3000:]
  epochs = [int(n) for n in re.findall(r"^\[worker:0\] Epoch (\d+)/6", resumed.stdout, re.M)]
  # No finished epoch is run again and none is lost: the job resumes at the
  # interrupted epoch (or the next one, if it finished before the kill landed).
  assert epochs == list(range(epochs[0], 7))
  assert epochs[0] in (interrupted, interrupted + 1) and epochs[0] >= 3
  digests = set(re.findall(r"\] strategy=.* weights=(\w+)", resumed.stdout))
  assert len(digests) == 1  # Both workers end identical.
  assert json.loads((tmp_path / "result.json").read_text())["weights_digest"] in digests


SAVED = r"BackupAndRestore: SIGTERM: backed up epoch (\d+) after batch (\d+)"
RESUMED = r"BackupAndRestore: resuming after epoch (\d+), batch (\d+)"


@pytest.mark.slow
def test_sigterm_backs_up_mid_epoch_and_the_job_resumes_there(tmp_path):
  # A task checks for SIGTERM after an epoch's first step, then about every second. At batch
  # 64 an epoch is 23 steps, well under a second: a SIGTERM that came after the first step
  # waited for the epoch's end, and under load one did (an epoch-end backup, no batch).
  # At batch 4 (360 steps) an epoch lasts over a second here, with a check inside it.
  command = helpers.tfdist_cli("train", "--strategy=mirrored", "--devices_per_worker=2",
                               "--epochs=3", "--batch_size=4", "--verbose=2",
                               f"--checkpoint_dir={tmp_path}")
  head, rest, code = helpers.signal_when(command, "Epoch 2/3", signal.SIGTERM)
  assert code == checkpoints.PREEMPTED_EXIT_CODE == 143, (head + rest)[-3000:]
  saved = re.search(SAVED, rest)
  assert saved, rest[-3000:]
  assert saved.group(1) == "2" and int(saved.group(2)) >= 1  # Mid-epoch 2, at a check.
  resumed = helpers.run(command, timeout=300)
  assert resumed.returncode == 0, resumed.stdout[-3000:]
  assert re.search(RESUMED, resumed.stdout).groups() == saved.groups()
  assert re.findall(r"^Epoch (\d)/3", resumed.stdout, re.M) == ["2", "3"]


class _StopAt(keras.callbacks.Callback):
  def __init__(self, epoch):
    super().__init__()
    self.epoch = epoch

  def on_epoch_begin(self, epoch, logs=None):
    if epoch == self.epoch:
      raise RuntimeError("interrupted")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["default", "one_device", "mirrored", "central_storage"])
def test_interrupted_and_resumed_equals_uninterrupted(name, tmp_path):
  x = np.random.default_rng(0).random((64, 3)).astype("float32")
  y = x.sum(axis=1, keepdims=True)

  def fit(callbacks):
    keras.utils.set_random_seed(1)
    strategy = tfdist.make_strategy(name)
    with strategy.scope():
      model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(1)])
      model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    history = model.fit(x, y, batch_size=16, epochs=4, shuffle=False, verbose=0,
                        callbacks=callbacks)
    return model, history

  straight, _ = fit([])
  backup = checkpoints.backup_and_restore(str(tmp_path))
  with pytest.raises(RuntimeError, match="interrupted"):
    fit([backup, _StopAt(2)])
  # The backup folder tfdist made is its user's only: it is restored as found.
  assert stat.S_IMODE(os.stat(backup.backup_dir).st_mode) == 0o700
  resumed, history = fit([checkpoints.backup_and_restore(str(tmp_path))])
  assert len(history.history["loss"]) == 2  # Epochs 3 and 4 only.
  for a, b in zip(straight.get_weights(), resumed.get_weights()):
    np.testing.assert_allclose(a, b, rtol=1e-5)


@pytest.mark.slow
def test_sigterm_to_the_launcher_backs_up_slow_steps_in_time_and_the_job_resumes(tmp_path):
  # Before: tasks checked every 10 batches (6 s here) and the launcher gave them
  # 5 s, so the backup was SIGKILLed.
  command = helpers.tfdist_cli("launch", "--workers=2", "--", sys.executable,
                               os.path.join(helpers.SCRIPTS, "slow_steps.py"), str(tmp_path))
  head, rest, code = helpers.signal_when(command, r"^\[worker:0\] Epoch 2/3", signal.SIGTERM)
  assert code == 128 + signal.SIGTERM, (head + rest)[-3000:]
  saved = {task: re.search(r"\[" + task + r"\] " + SAVED, rest) for task in ("worker:0",
                                                                          "worker:1")}
  assert all(saved.values()), rest[-3000:]
  assert saved["worker:0"].groups() == saved["worker:1"].groups()
  assert saved["worker:0"].group(1) == "2"  # Mid-epoch 2, not at its end.
  resumed = helpers.run(command, timeout=300)
  assert resumed.returncode == 0, resumed.stdout[-3000:]
  assert set(re.findall(RESUMED, resumed.stdout)) == {saved["worker:0"].groups()}
  assert len(set(re.findall(r"\] final weights (\w+)", resumed.stdout))) == 1


def test_sigterm_after_a_failed_fit_reaches_the_previous_handler(tmp_path):
  # Before: the handler stayed installed when fit raised (tf_keras skips
  # on_train_end then), swallowing SIGTERM for the life of the process.
  received = []
  previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
  try:
    strategy = tfdist.make_strategy("one_device")
    with strategy.scope():
      model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
      model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((32, 3), "float32")
    backup = checkpoints.backup_and_restore(str(tmp_path))
    with pytest.raises(RuntimeError, match="interrupted"):
      model.fit(x, x[:, :1], epochs=3, verbose=0, callbacks=[backup, _StopAt(1)])
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(100):  # Python runs handlers between bytecodes.
      if received:
        break
      time.sleep(0.01)
    assert received == [signal.SIGTERM]
  finally:
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.slow
def test_sigterm_under_parameter_servers_backs_up_and_the_job_resumes(tmp_path):
  # Before: under PSS the handler swallowed SIGTERM for the whole fit, and
  # nothing was backed up until the epoch's end.
  command = helpers.tfdist_cli("train", "--strategy=parameter_server", "--in_process",
                               "--epochs=3", "--verbose=2", f"--checkpoint_dir={tmp_path}")
  head, rest, code = helpers.signal_when(command, r"^Epoch 2/3", signal.SIGTERM)
  assert code == checkpoints.PREEMPTED_EXIT_CODE, (head + rest)[-3000:]
  assert re.search(r"BackupAndRestore: SIGTERM: backed up epoch 2 after batch \d+", rest), \
      rest[-3000:]
  resumed = helpers.run(command, timeout=300)
  assert resumed.returncode == 0, resumed.stdout[-3000:]
  # Epoch 1 finished before the signal: the job runs epoch 2 again, then 3.
  assert "BackupAndRestore: resuming after epoch 1" in resumed.stdout
  assert re.findall(r"^Epoch (\d)/3", resumed.stdout, re.M) == ["2", "3"]


@pytest.mark.slow
def test_keras3_backs_up_once_resumes_and_saves_once_under_two_workers(tmp_path):
  script = f"{helpers.SCRIPTS}/keras3_backup.py"

  def launch(phase):
    result = helpers.run(helpers.tfdist_cli("launch", "--workers=2", "--timeout=200", "--",
                                            *helpers.python(script, str(tmp_path), phase)),
                         timeout=260)
    assert result.returncode == 0, result.stdout[-3000:]
    return result.stdout

  stopped = launch("interrupt")
  # Keras 3's own callback would fail here on the HDF5 lock of the shared folder.
  assert stopped.count("STOPPED: interrupted; backup files: "
                       "['latest.weights.h5', 'training_metadata.json']") == 2
  resumed = launch("resume")
  for worker in (0, 1):
    epochs = re.findall(rf"^\[worker:{worker}\] EPOCH: (\d)", resumed, re.MULTILINE)
    assert epochs == ["2", "3"], resumed[-3000:]  # Resumed after the last backup.
  assert f"[worker:0] SAVED: {tmp_path}/model.keras" in resumed
  assert "[worker:1] SAVED: None" in resumed
  assert sorted(os.listdir(tmp_path)) == ["model.keras"]  # No backup, no worker's temp copy.
  # The barrier before the backup is deleted is traced: no warning about eager steps.
  assert "eagerly has significant overhead" not in stopped + resumed, resumed[-3000:]


@pytest.mark.parametrize("flavour", ["tf_keras", "keras3"])
def test_a_backup_that_would_outlast_the_grace_period_is_warned_about_at_the_first_check(
    flavour, monkeypatch, caplog, tmp_path):
  import keras as keras3
  kind = keras if flavour == "tf_keras" else keras3
  x = np.random.default_rng(0).random((64, 3)).astype("float32")

  def fit(grace):
    monkeypatch.setenv(checkpoints.GRACE_PERIOD_ENV, grace)
    model = kind.Sequential([kind.Input((3,)), kind.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    caplog.clear()
    with caplog.at_level("INFO", logger="tfdist"):
      model.fit(x, x.sum(1), batch_size=16, epochs=1, verbose=0,
                callbacks=[checkpoints.backup_and_restore(str(tmp_path), model=model)])
    return [r.getMessage() for r in caplog.records]

  # Checks come about every second: with 0.5 s, no backup can make it.
  messages = fit("0.5")
  warnings = [m for m in messages if m.startswith("A backup after SIGTERM")]
  assert len(warnings) == 1, messages
  assert re.match(r"A backup after SIGTERM would take about \d+\.\ds here \(\d+\.\ds to write, "
                  r"measured now, plus up to 1s to the next check\), more than the 0\.5s grace "
                  r"period \(TFDIST_GRACE_PERIOD\) between SIGTERM and SIGKILL: .*tfdist launch "
                  r"--grace_period.*or make the backup smaller\.$", warnings[0]), warnings[0]
  messages = fit("30")
  assert not [m for m in messages if m.startswith("A backup after SIGTERM")], messages
  assert [m for m in messages if re.match(r"BackupAndRestore: a backup takes \d+\.\d\ds here; "
                                          r"the grace period is 30s \(TFDIST_GRACE_PERIOD\)$", m)]
  assert not [p for p in os.listdir(tmp_path) if "grace-probe" in p]  # Its scratch is gone.


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
# Mirrored's replay is also `make test-versions`'s, on the oldest and newest supported TensorFlow.
@pytest.mark.parametrize("name", ["one_device", pytest.param("mirrored", marks=pytest.mark.versions)])
def test_fit_interrupted_twice_reads_on_where_it_stopped_and_ends_with_the_uninterrupted_weights(
    flavour, name, tmp_path):
  # Before: a resumed epoch read a new iterator in the first epoch's shuffle
  # order, from its first batch (Keras 3: from the epoch's start, re-training
  # the batches before the backup).
  k = keras
  if flavour == "keras3":
    import keras as k
  rng = np.random.default_rng(0)
  x = rng.random((96, 3)).astype("float32")
  y = (x @ np.array([[1.0], [-2.0], [0.5]], "float32")).astype("float32")

  def fit(*interrupt):
    k.utils.set_random_seed(1)
    strategy = tfdist.make_strategy(name)
    with strategy.scope():
      model = k.Sequential([k.Input((3,)), k.layers.Dense(4), k.layers.Dense(1)])
      model.compile(optimizer=k.optimizers.Adam(0.01), loss="mse")
    # A new dataset, as a restarted program makes: its first iterator draws the first order.
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
        96, seed=3, reshuffle_each_iteration=True).batch(16)
    callbacks = [checkpoints.backup_and_restore(str(tmp_path), check_every=1, model=model)]
    history = model.fit(data, epochs=4, verbose=0,
                        callbacks=callbacks + [helpers.interrupt(*interrupt)] if interrupt else callbacks)
    return model, history

  straight, _ = fit()
  with pytest.raises(RuntimeError, match="interrupted") as crashed:
    fit(1)  # A crash at the start of epoch 2: resumed from epoch 1's backup.
  helpers.let_go(crashed)  # The stopped fit's input iterators, freed while young.
  with pytest.raises(SystemExit) as stopped:
    fit(1, 3)  # SIGTERM in batch 4 of epoch 2, the first the resumed fit runs.
  assert stopped.value.code == checkpoints.PREEMPTED_EXIT_CODE
  helpers.let_go(stopped)
  resumed, history = fit()
  assert len(history.history["loss"]) == 3  # The rest of epoch 2, and epochs 3 and 4.
  for a, b in zip(straight.get_weights(), resumed.get_weights()):
    np.testing.assert_allclose(a, b, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_two_workers_stopped_by_sigterm_mid_epoch_end_with_the_uninterrupted_weights(
    flavour, tmp_path):
  def command(directory):
    return helpers.tfdist_cli("launch", "--workers=2", "--timeout=240", "--", *helpers.python(
        f"{helpers.SCRIPTS}/fit_resume.py", flavour, str(directory)))

  stopped = helpers.run(command(tmp_path / "job"), timeout=300)
  assert stopped.returncode == checkpoints.PREEMPTED_EXIT_CODE, stopped.stdout[-3000:]
  saved = re.findall(r"^\[worker:(\d)\] .*" + SAVED, stopped.stdout, re.M)
  assert sorted(w for w, *_ in saved) == ["0", "1"] and saved[0][1:] == saved[1][1:], saved
  assert saved[0][1] == "2", saved  # In epoch 2.
  resumed = helpers.run(command(tmp_path / "job"), timeout=300)
  assert resumed.returncode == 0, resumed.stdout[-3000:]
  assert len(re.findall(r"the input reads on after the (\d+) batches", resumed.stdout)) == 2
  found = {line.split("]")[0]: json.loads(line.split("RESULT ")[1])
           for line in resumed.stdout.splitlines() if "RESULT " in line}
  assert set(found) == {"[worker:0", "[worker:1"}, resumed.stdout[-3000:]
  result = found["[worker:0"]
  assert result["weights"] == found["[worker:1"]["weights"]
  assert result["epochs"] == 2  # The rest of epoch 2, and epoch 3.
  # Against the same training, never interrupted, on one device (the script's).
  assert result["relative_difference"] < 1e-5, result


@pytest.mark.versions
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_a_model_fits_again_without_the_backup_once_a_fit_with_it_ended(flavour, tmp_path):
  # Before, under tf_keras: the second fit raised "AttributeError: 'Sequential' object has
  # no attribute '_training_state'" (tf_keras's BackupAndRestore deletes it at the end).
  k = keras
  if flavour == "keras3":
    import keras as k
  x = np.ones((32, 3), "float32")
  data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(8)
  with tfdist.make_strategy("one_device").scope():
    model = k.Sequential([k.Input((3,)), k.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
  backup = checkpoints.backup_and_restore(str(tmp_path), model=model)
  assert len(model.fit(data, epochs=2, verbose=0, callbacks=[backup]).history["loss"]) == 2
  # Fine-tuning after it, as a notebook does: no backup, then with it again (a new one).
  assert len(model.fit(data, epochs=3, verbose=0).history["loss"]) == 3
  again = checkpoints.backup_and_restore(str(tmp_path / "again"), model=model)
  assert len(model.fit(data, epochs=1, verbose=0, callbacks=[again]).history["loss"]) == 1
  assert len(model.fit(data, epochs=1, verbose=0).history["loss"]) == 1


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_fit_names_an_input_that_cannot_be_replayed_before_training(flavour, caplog, tmp_path):
  k = keras
  if flavour == "keras3":
    import keras as k
  x = np.ones((32, 3), "float32")
  data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(8)
  python = data.map(lambda a, b: (tf.ensure_shape(
      tf.py_function(lambda t: t, [a], tf.float32), [None, 3]), b))
  with tfdist.make_strategy("one_device").scope():
    model = k.Sequential([k.Input((3,)), k.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
  # tfdist's records: caplog also holds TensorFlow's own warnings, such as its retracing
  # line once earlier tests in the same process traced enough functions.
  own = lambda: [r.getMessage() for r in caplog.records if r.name.split(".")[0] == "tfdist"]
  with caplog.at_level("WARNING", logger="tfdist"):
    model.fit(data, epochs=1, verbose=0,
              callbacks=[checkpoints.backup_and_restore(str(tmp_path), model=model)])
    assert not own(), caplog.text  # A replayable pipeline: nothing to say.
    model.fit(python, epochs=1, verbose=0,
              callbacks=[checkpoints.backup_and_restore(str(tmp_path), model=model)])
  [warning] = own()
  assert warning.startswith("The input pipeline cannot be replayed after an interruption")
  assert "it runs Python code (tf.py_function or tf.numpy_function)" in warning
  if flavour == "keras3":  # What Keras 3's own epoch loop cannot be replayed with.
    caplog.clear()
    with caplog.at_level("WARNING", logger="tfdist"):
      model.fit(data.repeat(2), epochs=1, steps_per_epoch=4, verbose=0,
                callbacks=[checkpoints.backup_and_restore(str(tmp_path), model=model)])
    assert "steps_per_epoch is given for finite data; repeat() it" in caplog.text
