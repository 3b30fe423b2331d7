"""tfdist.advice._advice (`tfdist.advise`): real measuring processes on this machine.

The decision table's branches are in tests/advice/test_decision.py; here the
library measures for real (few steps: the numbers are not what is tested).
"""

import pytest

import tfdist
from tfdist.advice import _advice as advice

# tfdist._lab.models.mlp: 784-512-512-10.
MLP_WEIGHTS = 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
FAST = {"steps": 5, "repeats": 1}


@pytest.mark.slow
def test_a_model_too_big_for_one_device_is_advised_model_parallelism_measured_here():
  result = tfdist.advise("mlp", devices_per_worker=2, memory_per_device_gb=0.008,
                         timeout=300, **FAST)
  assert isinstance(result, advice.AdviseResult)
  advised, measured = result.as_dict()["advice"], result.as_dict()["measurements"]
  assert advised["pick"]["name"] == "model_parallel (2 devices, 4 micro-batches)"
  assert sorted(measured["step"]) == ["central_storage", "mirrored", "model_parallel",
                                      "one_device", "one_device (global batch)"]
  assert all(seconds > 0 for seconds in measured["step"].values())
  fits = {o["name"]: o["fits"] for o in advised["options"]}
  assert not any(fits[name] for name in ("one_device", "mirrored", "central_storage"))
  # Adam on float32: weights, gradients and two slots per weight (plus its scalars).
  footprint = measured["footprint"]
  assert footprint["weights"] == footprint["gradients"] == 4 * MLP_WEIGHTS
  assert 8 * MLP_WEIGHTS <= footprint["slots"] <= 8 * MLP_WEIGHTS + 16
  assert result.text.startswith("recommendation: model_parallel")
  assert "more than 8 MB per device" in result.text


@pytest.mark.slow
def test_a_failing_measurement_stops_the_advice_with_its_reason(tmp_path):
  broken = tmp_path / "broken_model.py"
  broken.write_text("def model_fn():\n  raise RuntimeError('no weights for you')\n")
  with pytest.raises(advice.MeasurementError,
                     match=r"(?s)the local measurement on \d+ device\(s\) failed \(exit code 1\)"
                           r".*no weights for you"):
    tfdist.advise(str(broken), timeout=120, **FAST)


@pytest.mark.parametrize("options, match", [
    ({"batch_size": 0}, r"`batch_size` must be an integer >= 1. Received: batch_size=0"),
    ({"steps": 2}, r"`steps` must be an integer >= 5. Received: steps=2"),
    ({"timeout": -1.0}, r"`timeout` must be >= 0. Received: timeout=-1.0"),
])
def test_bad_options_are_refused_naming_the_field(options, match):
  with pytest.raises(ValueError, match=match):
    tfdist.advise("mlp", **options)


def test_a_missing_model_file_is_refused_before_anything_is_measured(capsys):
  with pytest.raises(ValueError, match=r"`--model` names no file.*Received: 'no_such.py'"):
    tfdist.advise("no_such.py")
  assert "measuring" not in capsys.readouterr().out
