"""tfdist.strategies._keras_guard: what fails in TF or Keras is refused before the first step, with the fix."""

import re

import numpy as np
import pytest

import helpers
import tfdist
from tfdist import keras


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["tf_keras", "keras3"])
def test_jit_compile_trains_where_xla_can_and_is_refused_before_a_step_elsewhere(flavour):
  k = __import__("keras") if flavour == "keras3" else keras
  x, y = helpers.regression_data()
  for name in ("one_device", "central_storage", "mirrored"):
    with tfdist.make_strategy(name).scope():
      model = k.Sequential([k.Input((4,)), k.layers.Dense(1)])
      model.compile(optimizer=k.optimizers.SGD(0.05), loss="mse", jit_compile=True)
    before = [np.array(w) for w in model.get_weights()]
    if name != "mirrored":
      losses = model.fit(x, y, batch_size=32, epochs=3, verbose=0).history["loss"]
      assert losses[-1] < losses[0], name
      continue
    # Raw TF fails inside the step: "Trying to access resource ... on a different device".
    with pytest.raises(ValueError, match=r"jit_compile=True cannot run under mirrored: XLA "
                       r"compiles each replica's step for one device.*Compile with "
                       r"jit_compile=False.*Received: a step compiled with XLA"):
      model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    for a, b in zip(before, model.get_weights()):
      np.testing.assert_array_equal(a, b)  # Refused before the first step.


@pytest.mark.slow
def test_jit_compile_is_refused_across_cpu_workers_and_parameter_servers():
  result = helpers.run(helpers.tfdist_cli(
      "launch", "--workers=2", "--", *helpers.python(f"{helpers.SCRIPTS}/xla_fit.py",
                                                    "multi_worker_mirrored", "tf_keras")),
      timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  for worker in (0, 1):  # tf_keras's tracing puts "in user code:" before the message.
    assert re.search(rf"\[worker:{worker}\] .*ValueError: jit_compile=True cannot run under "
                     r"multi_worker_mirrored: XLA has no collectives for CPU devices",
                     result.stdout), result.stdout[-3000:]
    assert re.search(rf"\[worker:{worker}\] .*\| weights moved: False", result.stdout)
  result = helpers.run(helpers.python(f"{helpers.SCRIPTS}/xla_fit.py", "parameter_server",
                                      "tf_keras"), timeout=300)
  assert re.search(r"ValueError: jit_compile=True cannot run under parameter_server: a "
                   r"worker's XLA-compiled step cannot read variables that live on the ps "
                   r"tasks", result.stdout), result.stdout[-3000:]
  assert "| weights moved: False" in result.stdout
