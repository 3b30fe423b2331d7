"""tfdist.training._user_code: the --model and --data modules of `tfdist train`."""

import pytest

from tfdist.training import _user_code as user_code


def test_config_fields_of_a_model_and_a_data_module(tmp_path):
  (tmp_path / "model.py").write_text("def model_fn():\n  return 'a model'\n")
  (tmp_path / "data.py").write_text("STEPS_PER_EPOCH = 7\n"
                                    "def dataset_fn(context, batch):\n  return (context, batch)\n")
  fields = user_code.config_fields(str(tmp_path / "model.py"), str(tmp_path / "data.py"), 64)
  assert sorted(fields) == ["dataset_fn", "model_fn", "steps_per_epoch"]
  assert fields["model_fn"]() == "a model" and fields["steps_per_epoch"] == 7
  assert fields["dataset_fn"]("ctx") == ("ctx", 64)  # Given the global batch size.
  assert user_code.config_fields(None, None, 64) == {}  # The default job.


@pytest.mark.parametrize("source, match", [
    (None, r"`--data` names no file; give a \.py file or an importable module\. "
           r"Received: '.*missing\.py'"),
    ("def dataset_function(context):\n  pass\n",
     r"`--data` module tfdist_user_data must define a function `dataset_fn`\. "
     r"Received: dataset_fn=None"),
])
def test_a_data_module_that_cannot_serve_names_the_flag_and_what_was_received(
    tmp_path, source, match):
  path = tmp_path / "missing.py"
  if source is not None:
    path.write_text(source)
  with pytest.raises(ValueError, match=match):
    user_code.config_fields(None, str(path), 64)
