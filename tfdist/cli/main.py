"""`tfdist <command> [flags]`: dispatches to one absl main per command.

Each command is a module of this package with its own flags and `main(argv)`;
only the chosen one is imported, so its flags are the only ones defined. A
module that takes positional arguments (a command after `--`) says so with
`TAKES_ARGUMENTS = True`; the others refuse them. `tfdist COMMAND --help` and
`tfdist help COMMAND` list the command's flags (`tfdist.cli._help`). A flag
that was renamed is refused with its new name (`RENAMED`).
"""

import importlib
import logging as std_logging
import os
import re
import sys
from typing import Optional, Sequence

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

# Command -> old flag name -> its name now. Nothing was published under the old
# names, so none lingers as an alias: each is refused with the new one.
RENAMED = {
    "train": {"devices": "devices_per_worker", "result_file": "output"},
    "verify": {"devices": "devices_per_worker", "result_file": "output"},
    "explain": {"replicas_per_worker": "devices_per_worker"},
    # --batch_size is the global batch in every command; these two take a replica's.
    "scale": {"batch_size": "per_replica_batch_size"},
    "advise": {"batch_size": "per_replica_batch_size"},
    "compare": {"local_sgd": "sync_every"},
    "launch": {"workdir": "work_dir"},
}


def renamed_flag(command: str, arguments: Sequence[str]) -> Optional[str]:
  """The error for the first renamed flag among the command's own arguments, or None.

  Read before absl parses, as absl would read a flag: `--old`, `-old`,
  `--old=value`, `--noold`; a launched command's arguments after '--' are its own.
  """
  renamed = RENAMED.get(command, {})
  for argument in arguments:
    if argument == "--":
      break
    match = re.fullmatch(r"--?(\w+)(=.*)?", argument, re.S)
    if not match:
      continue
    name = match.group(1)
    if name not in renamed and name.startswith("no"):
      name = name[2:]  # --noold: a boolean's false.
    if name in renamed:
      return f"tfdist {command}: --{name} was renamed --{renamed[name]}. Received: {argument}"
  return None


def _usage() -> str:
  lines = ["usage: tfdist <command> [flags]   (tfdist <command> --help, or tfdist help "
           "<command>, for its flags)", ""]
  lines += [f"  {name:<12} {text}" for name, text in COMMANDS.items()]
  return "\n".join(lines)


def _unknown(command: str) -> None:
  print(f"tfdist: unknown command {command!r}. Valid commands: {sorted(COMMANDS)}. "
        f"Received: {command!r}\n\n{_usage()}", file=sys.stderr)
  sys.exit(2)


def _asks_for_help(arguments) -> bool:
  """Whether the command's own arguments (not a launched command's, after '--') ask for help."""
  from tfdist.cli import _help  # pylint: disable=g-import-not-at-top
  own = arguments[:arguments.index("--")] if "--" in arguments else arguments
  return any(a in _help.HELP_ARGUMENTS for a in own)


def _help_command(argv) -> None:
  """`tfdist help [COMMAND]`, and `tfdist help --markdown FOLDER` (the CLI reference pages)."""
  from tfdist.cli import _help  # pylint: disable=g-import-not-at-top
  if len(argv) < 3 or argv[2] in _help.HELP_ARGUMENTS:
    print(_usage())
    sys.exit(0)
  if argv[2] == "--markdown":
    if len(argv) != 4 or not os.path.isdir(argv[3]):
      print(f"tfdist help --markdown FOLDER writes the reference pages into an existing "
            f"folder: {_help.REGENERATE}. Received: {argv[3:]}", file=sys.stderr)
      sys.exit(2)
    for name, text in _help.reference(COMMANDS).items():
      with open(os.path.join(argv[3], name), "w", encoding="utf-8") as f:
        f.write(text)
      print(os.path.join(argv[3], name))
    sys.exit(0)
  if argv[2] not in COMMANDS:
    _unknown(argv[2])
  _print_help(argv[2])


def _print_help(command: str) -> None:
  from tfdist.cli import _help  # pylint: disable=g-import-not-at-top
  module = importlib.import_module(f"tfdist.cli.{command}")
  print(_help.command_help(command, COMMANDS[command], module))
  sys.exit(0)


def run(argv=None) -> None:
  """Console-script entry point."""
  argv = list(sys.argv if argv is None else argv)
  if len(argv) < 2 or argv[1] in ("-h", "--help"):
    print(_usage())
    sys.exit(0 if len(argv) >= 2 else 2)
  # TensorFlow's C++ INFO and WARNING lines drown the training output; users who
  # want them set TF_CPP_MIN_LOG_LEVEL themselves. Children of launchers inherit it.
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  command = argv[1]
  if command == "help":
    _help_command(argv)
  if command not in COMMANDS:
    _unknown(command)
  # absl's --help lists the flags of __main__ only; a command's live in its module.
  if _asks_for_help(argv[2:]):
    _print_help(command)
  error = renamed_flag(command, argv[2:])
  if error:
    print(error, file=sys.stderr)
    sys.exit(2)
  module = importlib.import_module(f"tfdist.cli.{command}")
  from absl import app  # Deferred: `tfdist --help` needs nothing else.
  from absl import logging
  logging.set_verbosity(logging.WARNING)  # Also TensorFlow's Python logger.
  arguments = getattr(module, "normalize_argv", list)(argv[2:])
  app.run(_with_output(command, module), argv=[f"tfdist {command}"] + arguments)


def _with_output(command, module):
  """The module's main, after tfdist's output is set from `--verbosity` (absl's flag).

  Positional arguments are refused unless the module says it takes them.
  """

  def run_main(argv):
    from absl import flags  # pylint: disable=g-import-not-at-top
    if len(argv) > 1 and not getattr(module, "TAKES_ARGUMENTS", False):
      # absl leaves them to main, and a main that takes none would ignore them.
      from tfdist.cli import _help  # pylint: disable=g-import-not-at-top
      print(_help.unexpected_arguments(command, module, argv[1:]), file=sys.stderr)
      return 2
    output.show_on_console(console_level(flags.FLAGS["verbosity"]))
    # Keras 3 alone (TensorFlow 2.16+ installs no tf_keras): what only tf_keras runs says
    # what to install, in a line instead of a traceback; a command whose tasks need it, first.
    from tfdist import _keras_support  # pylint: disable=g-import-not-at-top
    if getattr(module, "NEEDS_TF_KERAS", False) and not _keras_support.tf_keras_installed():
      print(f"tfdist {command}: {_keras_support.tf_keras_missing('this command')}",
            file=sys.stderr)
      return 2
    try:
      return module.main(argv)
    except ModuleNotFoundError as e:
      if e.name != "tf_keras":
        raise
      if not isinstance(e, _keras_support.TfKerasNotInstalled):
        e = _keras_support.tf_keras_missing("this command (or the code it runs)")
      print(f"tfdist {command}: {e}", file=sys.stderr)
      return 2

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
