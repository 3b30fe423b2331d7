"""A custom training loop for every strategy and both Kerases, without the usual traps.

TensorFlow's "Custom training with tf.distribute" guide leaves the user to get
right, every time: the loss averaged over the *global* batch (not per replica),
regularization scaled by the number of replicas, the partial last batch,
metrics summed over every replica and worker (not read on one), several steps
per `tf.function`, ParameterServerStrategy's `ClusterCoordinator`, and a
checkpoint written once. `Loop` does them, modelled on Model Garden's orbit
(`StandardTrainer`: an inner loop of steps in one function; its runners kept
apart behind one interface) and Lightning Fabric (the user's step stays plain).

`Loop(strategy, model, ...)` returns the runner for the strategy's kind:
`SyncRunner` (`_sync.py`) for the synchronous strategies, whose sums live in
sync-on-read variables, and `ParameterServerRunner` (`_parameter_server.py`),
whose steps run on the workers as closures. Both are `Loop`s: the same
`fit`, `evaluate`, checkpoint and step (`_runner.py`).

Example:

    >>> loop = tfdist.training.loop.Loop(strategy, model, loss=keras.losses.MeanSquaredError(),
    ...                         optimizer=keras.optimizers.SGD(0.1), steps_per_loop=10)
    >>> history = loop.fit(dataset, epochs=3)          # {"loss": [...], "examples": [...]}
    >>> loop.evaluate(test_dataset)                    # {"loss": ..., "examples": 1001.0}

Or a step of your own, per replica, returning sums over its examples:

>>> def step(batch):
...   x, y = batch
...   with tf.GradientTape() as tape:
...     per_example = loss_fn(y, model(x, training=True))
...     loss = tfdist.training.loop.average_loss(per_example, model.losses)
...   grads = tape.gradient(loss, model.trainable_variables)
...   optimizer.apply_gradients(zip(grads, model.trainable_variables))
...   return {"loss": tf.reduce_sum(per_example)}
>>> loop = tfdist.training.loop.Loop(strategy, model, optimizer=optimizer, step_fn=step)

What a step returns is summed over replicas, workers and steps, and reported
divided by the number of examples, which the loop counts itself: every example
once, the partial last batch included (`get_next_as_optional`). Under
synchronous strategies the sums live in sync-on-read variables, so they cross
workers once per log, not once per step.

Under ParameterServerStrategy, `fit` takes a `dataset_fn(input_context)` and
`steps_per_epoch`, as Keras does; steps run on the workers through the
strategy's `ClusterCoordinator`, which re-runs a step whose worker was lost.
Keras 3 trains there too: its variables' `assign_add` is made the atomic TF op
(`tfdist.internals.keras.enable_atomic_assign_add`), else concurrent workers lose updates.
Keras 3 variables sharded over the ps tasks (`num_ps_shards > 1`) train too:
the gradients and updates go to the shards (`Loop.trainable_variables`, as
tf_keras lists sharded variables), and checkpoints save each variable whole
(`tfdist.internals.keras.enable_sharded_checkpoints`). A `step_fn` of your own must
differentiate `loop.trainable_variables`, not the model's.
"""

from tfdist._choices import Name
from tfdist.training.loop import _runner
from tfdist.training.loop._runner import EVALUATION_SHARDS
from tfdist.training.loop._runner import EXAMPLES
from tfdist.training.loop._runner import Loop
from tfdist.training.loop._runner import StepFn
from tfdist.training.loop._runner import average_loss
from tfdist.training.loop._parameter_server import ParameterServerRunner
from tfdist.training.loop._sync import SyncRunner

# The runners, in the order `Loop` tries them: the first whose strategy_types
# match, else the first with none.
_runner.RUNNERS.register(Name.PARAMETER_SERVER, ParameterServerRunner)
_runner.RUNNERS.register("sync", SyncRunner)

__all__ = ["EVALUATION_SHARDS", "EXAMPLES", "Loop", "ParameterServerRunner", "StepFn",
           "SyncRunner", "average_loss"]
