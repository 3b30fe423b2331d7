"""tfdist.training.config: the default job's rules, checked once, when a config is made."""

import subprocess
import sys

import pytest

from tfdist.training import config


@pytest.mark.parametrize("fields, match", [
    ({"evaluator": True, "strategy": "multi_worker_mirrored"},
     r"give both. Received: strategy='multi_worker_mirrored', checkpoint_dir=None$"),
    ({"evaluator": True, "strategy": "mirrored", "checkpoint_dir": "ckpt"},
     r"Received: strategy='mirrored', checkpoint_dir='ckpt'$"),
    ({"compress_gradients": True, "strategy": "parameter_server"},
     r"parameter-server training has none.*Received: strategy='parameter_server', "
     r"compress_gradients=True$"),
])
def test_fields_that_cannot_go_together_are_one_line_naming_them(fields, match):
  with pytest.raises(ValueError, match=match):
    config.TrainConfig(**fields)


def test_a_config_that_keeps_the_rules_is_made_and_imports_no_tensorflow():
  code = ("import sys; from tfdist.training import config; "
          "config.TrainConfig(strategy='parameter_server', evaluator=True, checkpoint_dir='c'); "
          "print('tensorflow' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=True).stdout
  assert out.split() == ["False"]
