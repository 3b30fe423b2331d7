"""tfdist.strategies: every strategy from its name trains unchanged Keras code."""

import numpy as np
import pytest

import helpers
import tfdist


LOCAL = [("one_device", {}), ("default", {}), ("mirrored", {}),
         ("mirrored", {"cross_device_ops": "reduction_to_one_device"}),
         ("mirrored", {"cross_device_ops": "hierarchical_copy"}),
         ("central_storage", {}), ("multi_worker_mirrored", {})]


@pytest.mark.slow
@pytest.mark.parametrize("name, options", LOCAL, ids=lambda v: str(v))
def test_fit_evaluate_predict(name, options):
  strategy = tfdist.make_strategy(name, **options)
  model, losses = helpers.build_and_fit(strategy)
  assert losses[-1] < 0.2 * losses[0], losses
  x, y = helpers.regression_data()
  assert model.evaluate(x, y, verbose=0) < 0.2 * losses[0]
  assert model.predict(x, verbose=0).shape == (256, 1)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mirrored", "central_storage"])
def test_sync_strategies_match_single_device(name):
  strategy = tfdist.make_strategy(name)
  assert strategy.num_replicas_in_sync == 2
  model, losses = helpers.build_and_fit(strategy)
  reference, reference_losses = helpers.build_and_fit(tfdist.make_strategy("one_device"))
  np.testing.assert_allclose(losses, reference_losses, rtol=1e-4)
  for weight, expected in zip(model.weights, reference.weights):
    np.testing.assert_allclose(weight.numpy(), expected.numpy(), rtol=1e-4, atol=1e-6)
