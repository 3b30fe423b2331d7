"""tfdist.cli.self_launch: a command launched again as every task, with the same flags."""

import sys
import types

from absl import flags

from tfdist.cli import self_launch
from tfdist.cluster import ClusterSpec


def test_the_command_repeats_every_flag_set():
  from tfdist.cli import bench
  flags.FLAGS(["x", "--suites=small_model,allreduce", "--repeats=1"])
  try:
    command = self_launch.command("bench", bench, ["--result_file=/tmp/r.json"])
  finally:
    flags.FLAGS.unparse_flags()
  assert command == [sys.executable, "-m", "tfdist", "bench", "--suites=small_model,allreduce",
                     "--repeats=1", "--result_file=/tmp/r.json"]


def test_a_repeated_flag_goes_on_once_per_value():
  # Before: a repeated flag went through as one argument with a newline inside.
  module = types.ModuleType("tfdist_test_repeated_flag")
  flags.DEFINE_multi_string("test_repeated", [], "A repeated flag.", module_name=module.__name__)
  try:
    flags.FLAGS(["x", "--test_repeated=a", "--test_repeated=b,c"])
    assert self_launch.command("x", module) == [sys.executable, "-m", "tfdist", "x",
                                                "--test_repeated=a", "--test_repeated=b,c"]
  finally:
    flags.FLAGS.unparse_flags()
    delattr(flags.FLAGS, "test_repeated")


def test_the_writer_is_the_chief_or_worker_0():
  two = ClusterSpec.local(workers=2)
  assert self_launch.is_writer(None)
  assert self_launch.is_writer(two.with_task("worker", 0))
  assert not self_launch.is_writer(two.with_task("worker", 1))
  with_chief = ClusterSpec.local(workers=1, ps=1, chief=True)
  assert self_launch.is_writer(with_chief.with_task("chief", 0))
  assert not self_launch.is_writer(with_chief.with_task("worker", 0))
