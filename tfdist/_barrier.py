"""A barrier across every replica of a strategy: one all-reduce of a scalar."""


def barrier(strategy) -> None:
  """Returns once every replica of `strategy`, on every worker, has called it.

  Traced in a `tf.function`: `strategy.run` called eagerly under a multi-worker
  strategy logs "Using CollectiveAllReduceStrategy eagerly has significant
  overhead currently", a warning about training steps that a user would read
  at the end of every fit. Traced at each call (a barrier ends a fit, not a step),
  so no function keeps the strategy alive.
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel

  @tf.function(autograph=False)
  def all_reduce():
    return strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)

  all_reduce()
