"""tfdist.training._local_sgd: local SGD and DiLoCo, held to synchronous training where they must equal it.

The anchor: with sync_every=1, plain SGD and no outer optimizer, local SGD is
synchronous training, so it must equal one device on the global batches to
1e-5. DiLoCo with outer learning rate 1 and momentum 0 is local SGD. In
process the replicas are MirroredStrategy's over two logical CPUs; the slow
test runs a real 2-worker MultiWorkerMirrored cluster under `tfdist launch`.
"""

import json
import logging

import numpy as np
import pytest
import tensorflow as tf

import helpers
import tfdist
from tfdist.training import checkpoints
from tfdist.training import loop as loop_lib
from tfdist.training._local_sgd import LocalSGDOptions as Options

KERASES = helpers.KERASES
_data = helpers.regression_batches  # 100 examples in batches of 32: the last one has 4.
LOCAL_SGD_TRAIN = f"{helpers.SCRIPTS}/local_sgd_train.py"


def _compiled(keras, strategy, optimizer=None):
  """A small model compiled in the strategy's scope; `optimizer`: one, or a function making one there."""
  keras.utils.set_random_seed(0)
  with strategy.scope():  # Keras 3's optimizers belong to the strategy they are made under.
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="tanh"),
                              keras.layers.Dense(1)])
    if optimizer is not None and not hasattr(optimizer, "apply_gradients"):
      optimizer = optimizer()
    model.compile(optimizer=optimizer or keras.optimizers.SGD(0.1), loss="mse",
                  metrics=["mae"])
  return model


def _difference(a, b):
  return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


def _copies(strategy, variable):
  """The replicas' copies of a variable (Keras 3's wraps a TF variable)."""
  variable = variable if isinstance(variable, tf.Variable) else variable.value
  return [copy.numpy() for copy in strategy.experimental_local_results(variable)]


def _replica_spread(strategy, model):
  """The largest difference between the two replicas' copies of the weights."""
  return max(float(np.abs(a - b).max())
             for a, b in (_copies(strategy, v) for v in model.trainable_variables))


@pytest.mark.versions  # `make test-versions` runs it on the oldest and newest supported TensorFlow too.
@pytest.mark.slow
def test_every_step_synced_with_sgd_is_synchronous_training():
  """fit and the Loop at sync_every=1 equal one device; H>1 replicas part, a sync joins them.

  tf_keras here; both Kerases under two workers in the slow test below.
  """
  keras = tfdist.keras
  reference = _compiled(keras, tf.distribute.get_strategy())
  reference_history = reference.fit(_data(), epochs=2, verbose=0).history
  strategy = tfdist.make_strategy("mirrored")
  model = tfdist.training.local_sgd(_compiled(keras, strategy), Options(1))
  history = model.fit(_data(), epochs=2, verbose=0).history
  assert _difference(model.get_weights(), reference.get_weights()) < 1e-5
  np.testing.assert_allclose(history["loss"], reference_history["loss"], rtol=1e-5)
  # The loop, likewise.
  model = _compiled(keras, strategy)
  loop = loop_lib.Loop(strategy, model, loss=keras.losses.MeanSquaredError(),
                       optimizer=model.optimizer, local_sgd=Options(1), steps_per_loop=2)
  loop.fit(_data(), epochs=2, verbose=False)
  assert _difference(model.get_weights(), reference.get_weights()) < 1e-5
  # Every 3 steps: 8 steps end 2 past a sync, the replicas apart; a sync joins them.
  local = tfdist.training.local_sgd(_compiled(keras, strategy), Options(3))
  local.fit(_data(), epochs=2, verbose=0)
  assert _replica_spread(strategy, local) > 1e-3
  diloco = tfdist.training.local_sgd(_compiled(keras, strategy), Options(
      3, outer_optimizer="nesterov", outer_learning_rate=1.0, outer_momentum=0.0))
  diloco.fit(_data(), epochs=2, verbose=0)
  # DiLoCo with outer learning rate 1 and no momentum is local SGD.
  for a, b in zip(local.trainable_variables, diloco.trainable_variables):
    np.testing.assert_allclose(_copies(strategy, a), _copies(strategy, b), atol=1e-5)
  local.fit(_data().take(1), epochs=1, verbose=0)  # Step 9: a sync.
  assert _replica_spread(strategy, local) == 0.0


@pytest.mark.slow
def test_a_resumed_loop_keeps_the_sync_point_and_the_outer_state(tmp_path):
  keras, strategy = tfdist.keras, tfdist.make_strategy("mirrored")

  def loop(directory):  # Plain SGD: the inner optimizer has no per-replica state to lose.
    model = _compiled(keras, strategy)
    return model, loop_lib.Loop(strategy, model, loss=keras.losses.MeanSquaredError(),
                                optimizer=model.optimizer,
                                local_sgd=Options(2, outer_optimizer="nesterov"),
                                checkpoint_dir=str(directory))

  whole, whole_loop = loop(tmp_path / "whole")
  whole_loop.fit(_data(), epochs=2, verbose=False)
  _, first = loop(tmp_path / "resumed")
  first.fit(_data(), epochs=1, verbose=False)  # 4 steps: a sync at 2 and 4, then saved.
  resumed, second = loop(tmp_path / "resumed")
  assert second.epoch.numpy() == 1 and second.local_sgd.steps_to_sync() == 2
  second.fit(_data(), epochs=2, verbose=False)
  assert _difference(resumed.get_weights(), whole.get_weights()) < 1e-6
  # A checkpoint between syncs keeps where the next one falls.
  _, third = loop(tmp_path / "resumed")
  third.optimizer.iterations.assign(9)
  third._save()  # pylint: disable=protected-access
  assert loop(tmp_path / "resumed")[1].local_sgd.steps_to_sync() == 1


@pytest.mark.slow
@pytest.mark.parametrize("flavour", KERASES)
def test_what_a_fit_backup_saves_holds_the_outer_state(flavour, tmp_path):
  """Each Keras's backup format (tf_keras: a TF checkpoint of the model; Keras 3: its weights file)."""
  keras, strategy = helpers.keras_of(flavour), tfdist.make_strategy("mirrored")

  def diloco():
    return tfdist.training.local_sgd(_compiled(keras, strategy),
                                     Options(2, outer_optimizer="nesterov"))

  trained = diloco()
  trained.fit(_data(), epochs=1, verbose=0)  # 4 steps: 2 syncs, outer momentum moved.
  restored = diloco()
  _back_up_and_restore(flavour, trained, restored, tmp_path)
  assert int(restored.optimizer.iterations.numpy()) == 4
  outer = lambda model: [v.numpy() for v in model.optimizer.variables
                         if "local_sgd" in v.name]
  # An anchor and a momentum for each of the 4 weights; the momenta moved.
  assert len(outer(trained)) == 8 and np.abs(outer(trained)[-1]).max() > 0
  assert _difference(outer(restored), outer(trained)) == 0.0


def _back_up_and_restore(flavour, saved, restored, tmp_path):
  """`saved`'s weights and optimizer state into `restored`, as each Keras's backup keeps them."""
  if flavour == "keras3":
    saved.save_weights(str(tmp_path / "backup.weights.h5"))
    restored.load_weights(str(tmp_path / "backup.weights.h5"))
  else:
    path = tf.train.Checkpoint(model=saved).write(str(tmp_path / "backup"))
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()


def _every_copy(strategy, model):
  """Each replica's copy of the weights and of the inner optimizer's slots, in one list."""
  variables = model.trainable_variables + [v for v in model.optimizer.variables
                                           if len(v.shape) and "local_sgd" not in v.name]
  return np.concatenate([copy.ravel() for v in variables for copy in _copies(strategy, v)])


@pytest.mark.versions  # `make test-versions` runs it on the oldest and newest supported TensorFlow too.
@pytest.mark.slow
@pytest.mark.parametrize("flavour", KERASES)
def test_fit_stopped_between_syncs_with_adam_resumes_every_replica_as_it_was(flavour, tmp_path):
  """A crash and a SIGTERM, both between syncs: each replica's weights and Adam moments come back."""
  keras = helpers.keras_of(flavour)
  x, y = helpers.regression_data(96)

  def fit(*interrupt):
    strategy = tfdist.make_strategy("mirrored")
    model = tfdist.training.local_sgd(
        _compiled(keras, strategy, lambda: keras.optimizers.Adam(0.01)),
        Options(4, outer_optimizer="nesterov"))
    callbacks = [checkpoints.backup_and_restore(str(tmp_path), check_every=1, model=model)]
    # 6 steps an epoch: the epoch's backup (step 6) and SIGTERM's (step 10) fall between syncs.
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), epochs=3, verbose=0,
              callbacks=callbacks + [helpers.interrupt(*interrupt)] if interrupt else callbacks)
    return strategy, model

  strategy, straight = fit()
  with pytest.raises(RuntimeError, match="interrupted") as crashed:
    fit(1)  # A crash at the start of epoch 2: resumed from epoch 1's backup, at step 6.
  helpers.let_go(crashed)  # The stopped fit's input iterators, freed while young.
  with pytest.raises(SystemExit) as stopped:
    fit(1, 3)  # SIGTERM in batch 4 of epoch 2: backed up at step 10.
  assert stopped.value.code == checkpoints.PREEMPTED_EXIT_CODE
  helpers.let_go(stopped)
  _, resumed = fit()
  assert int(resumed.optimizer.iterations.numpy()) == 18
  assert _replica_spread(strategy, straight) > 1e-4  # 2 steps past the sync at 16.
  np.testing.assert_allclose(_every_copy(strategy, resumed), _every_copy(strategy, straight),
                             atol=1e-6)
  # Gone with the backup when fit ends: no folder (or file) of copies left in it.
  assert not list(tmp_path.rglob("local_sgd_replicas*"))


def test_copies_saved_by_more_or_fewer_replicas_are_a_warning_and_change_nothing(tmp_path,
                                                                                   caplog):
  """A job resumed on fewer devices (2 replicas saved, 1 now), or on more (1 saved, 2 now)."""
  keras = tfdist.keras
  strategies = {n: tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(n)])
                for n in (1, 2)}

  def model(replicas):
    adam = lambda: keras.optimizers.Adam(0.01)
    return tfdist.training.local_sgd(_compiled(keras, strategies[replicas], adam), Options(4))

  for saved, now in ((2, 1), (1, 2)):
    directory = str(tmp_path / f"{saved}-{now}")
    trained = model(saved)
    for v in trained.trainable_variables:  # Values the restored model has not.
      v.assign_add(tf.ones_like(v))
    getattr(trained, "_tfdist_local_sgd").save_replicas(directory)
    restored = model(now)
    before = _every_copy(strategies[now], restored)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tfdist"):
      assert not getattr(restored, "_tfdist_local_sgd").restore_replicas(directory)
    assert f"were saved by {saved} replicas, and it has {now} now" in caplog.text
    np.testing.assert_array_equal(_every_copy(strategies[now], restored), before)


@pytest.mark.slow
def test_a_loop_resumed_between_syncs_with_momentum_resumes_every_replica_as_it_was(tmp_path):
  keras, strategy = tfdist.keras, tfdist.make_strategy("mirrored")

  def loop(directory):
    model = _compiled(keras, strategy, lambda: keras.optimizers.SGD(0.1, momentum=0.9))
    return model, loop_lib.Loop(strategy, model, loss=keras.losses.MeanSquaredError(),
                                optimizer=model.optimizer, local_sgd=Options(3),
                                checkpoint_dir=str(directory))

  whole, whole_loop = loop(tmp_path / "whole")
  whole_loop.fit(_data(), epochs=2, verbose=False)  # 8 steps: the last sync at 6.
  _, first = loop(tmp_path / "resumed")
  first.fit(_data(), epochs=1, verbose=False)  # 4 steps, saved between syncs.
  resumed, second = loop(tmp_path / "resumed")
  second.fit(_data(), epochs=2, verbose=False)
  assert _replica_spread(strategy, whole) > 1e-4
  np.testing.assert_allclose(_every_copy(strategy, resumed), _every_copy(strategy, whole),
                             atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("flavour", KERASES)
def test_an_outer_optimizer_object_is_diloco_with_that_optimizer(flavour, tmp_path):
  keras, strategy = helpers.keras_of(flavour), tfdist.make_strategy("mirrored")

  def diloco(outer):
    model = _compiled(keras, strategy)
    with strategy.scope():  # Keras 3's optimizers belong to the strategy they are made under.
      outer = outer() if callable(outer) else outer
    nesterov = dict(outer_learning_rate=0.5, outer_momentum=0.8) if outer == "nesterov" else {}
    return tfdist.training.local_sgd(model, Options(2, outer_optimizer=outer, **nesterov))

  def trained(outer):
    model = diloco(outer)
    model.fit(_data(), epochs=1, verbose=0)  # 4 steps: syncs at 2 and 4.
    return model, np.concatenate([copy.ravel() for v in model.trainable_variables
                                  for copy in _copies(strategy, v)])

  # SGD(1) moves the last sync's weights to the replicas' mean: local SGD.
  np.testing.assert_allclose(trained(lambda: keras.optimizers.SGD(1.0))[1], trained(None)[1],
                             atol=1e-6)
  model, weights = trained(lambda: keras.optimizers.SGD(0.5, momentum=0.8, nesterov=True))
  np.testing.assert_allclose(weights, trained("nesterov")[1], atol=1e-6)
  # Its state is in the backup, as the "nesterov" string's is.
  restored = diloco(lambda: keras.optimizers.SGD(0.5, momentum=0.8, nesterov=True))
  _back_up_and_restore(flavour, model, restored, tmp_path)
  outer = lambda m: [v.numpy() for v in getattr(m, "_tfdist_local_sgd").outer.variables]
  assert int(outer(model)[0]) == 2  # Its iterations: one a sync.
  assert np.abs(outer(model)[-1]).max() > 0  # A momentum.
  assert _difference(outer(restored), outer(model)) == 0.0
  other = helpers.keras_of("tf_keras" if flavour == "keras3" else "keras3")
  with pytest.raises(ValueError, match=r"`outer_optimizer` must be an optimizer of the model's "
                                       r"Keras.*Received: .*SGD"):
    diloco(lambda: other.optimizers.SGD(0.7))
  outside = keras.optimizers.SGD(0.7)  # Made outside the scope: Keras 3's iterations not mirrored.
  if flavour == "keras3":
    with pytest.raises(ValueError, match=r"must be made in the strategy's scope under Keras 3.*"
                                         r"Received: SGD made outside it"):
      diloco(outside)
  else:
    diloco(outside)  # tf_keras's updates its iterations across replicas, made anywhere.
    with pytest.raises(ValueError, match=r"not a legacy optimizer.*Received: legacy SGD"):
      diloco(lambda: keras.optimizers.legacy.SGD(0.7))  # It has no build.
  # Built already (by local_sgd here): its variables are another model's.
  used = getattr(model, "_tfdist_local_sgd").outer
  with pytest.raises(ValueError, match=r"`outer_optimizer` must be new, not built.*"
                                       r"Received: SGD built already, with \d+ variables"):
    diloco(used)
  # The "nesterov" options beside an object, which has its own.
  for field, value in (("outer_learning_rate", 0.5), ("outer_momentum", 0.8)):
    with pytest.raises(ValueError, match=rf"`{field}` is for outer_optimizer='nesterov'.*"
                                         rf"Received: {field}={value}, outer_optimizer=SGD"):
      with strategy.scope():
        Options(2, outer_optimizer=keras.optimizers.SGD(0.5), **{field: value})


def test_refusals_name_the_field_and_the_value():
  keras = tfdist.keras
  for name in ("one_device", "central_storage"):
    model = _compiled(keras, tfdist.make_strategy(name))
    with pytest.raises(ValueError, match=r"only multi_worker_mirrored and mirrored keep.*"
                                         r"Received: (OneDevice|CentralStorage)"):
      tfdist.training.local_sgd(model, Options(4))
  strategy = tfdist.make_strategy("mirrored")
  model = _compiled(keras, strategy)
  with pytest.raises(ValueError, match=r"`sync_every` must be an integer >= 1.*sync_every=0"):
    Options(0)
  with pytest.raises(ValueError, match=r"`sync_every` must be an integer >= 1.*sync_every=2.0"):
    Options(2.0)
  with pytest.raises(ValueError, match=r"`outer_optimizer` must be one of.*'adam'"):
    Options(2, outer_optimizer="adam")
  with pytest.raises(ValueError, match=r"`outer_learning_rate` must be > 0.*=0.0"):
    Options(2, outer_optimizer="nesterov", outer_learning_rate=0.0)
  with pytest.raises(ValueError, match=r"`outer_momentum` must be in \[0, 1\).*=1.0"):
    Options(2, outer_optimizer="nesterov", outer_momentum=1.0)
  # Plain local SGD averages: a learning rate or momentum given with it would be ignored.
  with pytest.raises(ValueError, match=r"`outer_learning_rate` is for outer_optimizer='nesterov'.*"
                                       r"Received: outer_learning_rate=0.5, outer_optimizer='none'"):
    Options(2, outer_learning_rate=0.5)
  # The options are one value, not its fields: the old keyword call is named.
  with pytest.raises(TypeError, match=r"LocalSGDOptions\(sync_every=H, \.\.\.\)\. "
                                      r"Received: 4"):
    tfdist.training.local_sgd(model, 4)
  tfdist.training.accumulate(model, steps=2)
  with pytest.raises(ValueError, match=r"do not combine.*accumulate_steps=2, sync_every=4"):
    tfdist.training.local_sgd(model, Options(4))
  with pytest.raises(ValueError, match=r"do not combine.*accumulate_steps=2, sync_every=4"):
    loop_lib.Loop(strategy, model, loss=keras.losses.MeanSquaredError(),
                  optimizer=model.optimizer, accumulate_steps=2, local_sgd=Options(4))
  scaled = _compiled(keras, strategy, keras.mixed_precision.LossScaleOptimizer(
      keras.optimizers.SGD(0.1)))
  with pytest.raises(ValueError, match=r"LossScaleOptimizer.*Received: LossScaleOptimizer"):
    tfdist.training.local_sgd(scaled, Options(4))
  from tfdist.training import config
  with pytest.raises(ValueError, match=r"`local_sgd`.*Received: strategy='parameter_server', "
                                       r"sync_every=4"):
    config.TrainConfig(strategy="parameter_server", local_sgd=Options(4))
  with pytest.raises(TypeError, match=r"`local_sgd` takes.*Received: local_sgd=4"):
    config.TrainConfig(strategy="multi_worker_mirrored", local_sgd=4)
  # tests/cli/test_train.py: --outer_optimizer without --sync_every is refused by flag.


@pytest.mark.slow
def test_two_workers_train_locally_and_meet_at_each_sync(tmp_path):
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--workers=2", "--timeout=240", "--",
      *helpers.python(LOCAL_SGD_TRAIN, str(tmp_path))), timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  results = {line.split("]")[0]: json.loads(line.split("RESULT ")[1])
             for line in result.stdout.splitlines() if "RESULT " in line}
  assert set(results) == {"[worker:0", "[worker:1"}, result.stdout[-3000:]
  for flavour in ("tf_keras", "keras3"):
    workers = [results[w][flavour] for w in ("[worker:0", "[worker:1")]
    for worker in workers:
      assert worker["synchronous_difference"] < 1e-5, results  # H=1 with SGD: synchronous.
    # DiLoCo every 3 steps: between syncs the workers' weights differ; after one, the same.
    assert workers[0]["between_syncs"] != workers[1]["between_syncs"]
    assert workers[0]["after_sync"] == workers[1]["after_sync"]
  # With Adam, resumed between syncs from a backup: each worker's own weights and moments.
  workers = [results[w]["tf_keras"] for w in ("[worker:0", "[worker:1")]
  assert workers[0]["straight"] != workers[1]["straight"]
  for worker in workers:
    np.testing.assert_allclose(worker["resumed"], worker["straight"], atol=1e-6)
