"""`tfdist <command> [flags]`: dispatches to one absl main per command.

Each command is a module of this package with its own flags and `main(argv)`;
only the chosen one is imported, so its flags are the only ones defined.
"""

import importlib
import logging as std_logging
import os
import sys

from tfdist import output

COMMANDS = {
    "train": "Train a Keras model under any strategy (default: a CNN on the embedded digits).",
    "compare": "Train the same model under every strategy and print one table.",
    "verify": "Train your model under a strategy and on one device; exit 1 where they differ.",
    "launch": "Run a command as every task of a local cluster, each with its TF_CONFIG.",
    "task": "Run a command as this task of a pod or replica, with TF_CONFIG built from its environment.",
    "doctor": "Check versions, devices, the Keras matrix and the cluster; exit 1 on problems.",
    "explain": "Dry-run distributed input: what each worker and replica receives.",
    "scale": "Predict how a model scales (α-β model), check it here, draw the curve.",
    "advise": "Which strategy? Measure the ways to train a model here and recommend one.",
    "data_service": "Run a tf.data service dispatcher or data worker (see launch --data_workers).",
    "bench": "Measure tfdist against raw TensorFlow side by side; print ratios, write JSON.",
}


def _usage() -> str:
  lines = ["usage: tfdist <command> [flags]   (tfdist <command> --help for its flags)", ""]
  lines += [f"  {name:<12} {text}" for name, text in COMMANDS.items()]
  return "\n".join(lines)


def run(argv=None) -> None:
  """Console-script entry point."""
  argv = list(sys.argv if argv is None else argv)
  if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
    print(_usage())
    sys.exit(0 if len(argv) >= 2 else 2)
  command = argv[1]
  if command not in COMMANDS:
    print(f"tfdist: unknown command {command!r}. Valid commands: {sorted(COMMANDS)}. "
          f"Received: {command!r}\n\n{_usage()}", file=sys.stderr)
    sys.exit(2)
  # TensorFlow's C++ INFO and WARNING lines drown the training output; users who
  # want them set TF_CPP_MIN_LOG_LEVEL themselves. Children of launchers inherit it.
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  module = importlib.import_module(f"tfdist.cli.{command}")
  from absl import app  # Deferred: `tfdist --help` needs nothing else.
  from absl import logging
  logging.set_verbosity(logging.WARNING)  # Also TensorFlow's Python logger.
  arguments = getattr(module, "normalize_argv", list)(argv[2:])
  app.run(_with_output(module.main), argv=[f"tfdist {command}"] + arguments)


def _with_output(main):
  """`main`, after tfdist's output is set from `--verbosity` (absl's flag, every command has it)."""

  def run_main(argv):
    from absl import flags  # pylint: disable=g-import-not-at-top
    output.show_on_console(console_level(flags.FLAGS["verbosity"]))
    return main(argv)

  return run_main


def console_level(verbosity_flag) -> int:
  """The level of tfdist's records a command shows: INFO, or what `--verbosity` says.

  absl's scale: -1 warnings (and TensorFlow's default here), 0 info, 1 debug;
  -2 errors only. Without the flag, tfdist's lines show as the command always
  printed them, and TensorFlow's Python logger stays at warnings.
  """
  if not verbosity_flag.present:
    return std_logging.INFO
  from absl.logging import converter  # pylint: disable=g-import-not-at-top
  return converter.absl_to_standard(verbosity_flag.value)


if __name__ == "__main__":
  run()
