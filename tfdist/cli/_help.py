"""`tfdist COMMAND --help`, refused positional arguments, and the CLI reference page.

absl's own `--help` lists the flags of the `__main__` module only, and
tfdist's flags live in `tfdist.cli.<command>`: this module lists a command's
key flags (`FlagValues.get_key_flags_for_module`), grouped under short
headings, each group rendered by absl's `FlagValues.module_help`.
`tfdist help --markdown docs/reference` writes every command's flags as the
reference pages docs/reference/cli*.md (`REFERENCE_PAGES`).
"""

import importlib
import inspect
import re
from types import ModuleType
from typing import Dict, Iterator, List, Mapping, Sequence, Tuple

from absl import flags

# The arguments that ask for a command's help (absl's --help and --helpshort).
HELP_ARGUMENTS = ("-h", "--help", "-?", "--helpshort")
REFERENCE_FOLDER = "docs/reference"
REGENERATE = f"python -m tfdist help --markdown {REFERENCE_FOLDER}"
# The reference pages, in order: file name -> (title, what its commands do, the commands).
# The first page also lists every command, with a link to its page.
REFERENCE_PAGES: Dict[str, Tuple[str, str, Tuple[str, ...]]] = {
    "cli.md": ("Command line",
               "This page gives the commands that train, compare and verify a model, and "
               "the one that explains its input.",
               ("train", "compare", "verify", "explain")),
    "cli-launch.md": ("Command line: launching and checking a job",
                      "This page gives the commands that launch a job, run one of its "
                      "tasks, check the machines and serve the job's data.",
                      ("launch", "task", "doctor", "data_service")),
    "cli-measure.md": ("Command line: measuring",
                       "This page gives the commands that predict how a model scales, advise "
                       "a strategy and benchmark tfdist.",
                       ("scale", "advise", "bench")),
}
# Flags not listed for a command go here.
DEFAULT_GROUP = "options"
# Set by a command for its own tasks, never by its user.
_INTERNAL = "Internal:"

# Command -> heading -> its flags; a command not listed shows one group.
GROUPS: Dict[str, Dict[str, Tuple[str, ...]]] = {
    "train": {
        "what to run": ("strategy", "model", "data", "keras", "epochs", "batch_size",
                        "learning_rate", "precision"),
        "cluster": ("devices_per_worker", "workers", "ps", "in_process", "evaluator", "timeout",
                    "max_restarts"),
        "output": ("checkpoint_dir", "export_dir", "tensorboard_dir", "output", "verbose"),
        "advanced": ("lr_scaling", "warmup_steps", "communication", "cross_device_ops",
                     "compress_gradients", "accumulate_steps", "sync_every", "outer_optimizer",
                     "outer_learning_rate", "outer_momentum"),
    },
    "compare": {
        "what to run": ("strategies", "keras", "epochs", "batch_size", "sync_every",
                        "thread_share"),
        "output": ("output", "tolerance", "timeout"),
    },
    "verify": {
        "what to run": ("model", "data", "strategy", "steps", "batch_size", "tolerance"),
        "cluster": ("devices_per_worker", "workers", "timeout"),
        "output": ("output",),
    },
    "launch": {
        "cluster": ("workers", "ps", "chief", "evaluator", "data_workers", "data_work_dir"),
        "tasks": ("keras", "network", "trains_alone", "profile", "profile_dir"),
        "supervision": ("timeout", "max_restarts", "grace_period", "stall_timeout"),
        "ray": ("ray", "ray_cpus_per_task", "ray_resources", "ray_placement", "min_workers",
                "rescale_timeout"),
        "slurm": ("slurm", "time_minutes", "sbatch_template", "sbatch", "work_dir"),
        "kubernetes": ("kubernetes", "image", "name", "namespace", "run_as_user",
                       "network_policy"),
    },
    "scale": {
        "what to run": ("model", "per_replica_batch_size", "compress_gradients"),
        "measurement": ("steps", "repeats", "pairs"),
        "output": ("plot", "output"),
    },
    "advise": {
        "what to run": ("model", "data", "per_replica_batch_size", "learning_rate",
                        "micro_batches"),
        "your cluster": ("workers", "devices_per_worker", "colocated", "memory_per_device",
                         "busbw_gbps", "latency_ms"),
        "measurement": ("steps", "repeats", "timeout", "check", "check_longer"),
        "output": ("output",),
    },
    "bench": {
        "what to run": ("suites", "repeats", "steps"),
        "allreduce, scaling and advise suites": ("sizes_mb", "scale_models", "scale_pairs",
                                                 "scale_steps", "advise_cases"),
        "serving suite": ("serving_model", "serving_max_batch_sizes",
                          "serving_batch_timeouts_micros", "serving_processes",
                          "serving_clients", "serving_requests", "serving_batch_threads",
                          "latency_target_ms", "batching_parameters_out"),
        "output": ("output",),
    },
}


def own_flags(module: ModuleType) -> List[flags.Flag]:
  """The key flags of a command's module that its user sets (not the internal ones)."""
  return [flag for flag in flags.FLAGS.get_key_flags_for_module(module)
          if not (flag.help or "").startswith(_INTERNAL)]


def groups(command: str, module: ModuleType) -> List[Tuple[str, List[flags.Flag]]]:
  """(heading, flags) of the command, in GROUPS' order, the rest under DEFAULT_GROUP."""
  by_name = {flag.name: flag for flag in own_flags(module)}
  found = []
  for heading, names in GROUPS.get(command, {}).items():
    listed = [by_name.pop(name) for name in names if name in by_name]
    if listed:
      found.append((heading, listed))
  if by_name:
    found.append((DEFAULT_GROUP, list(by_name.values())))
  return found


def stale_group_names(command: str, module: ModuleType) -> List[str]:
  """Names GROUPS lists for the command that are none of its flags."""
  names = {flag.name for flag in own_flags(module)}
  return [name for listed in GROUPS.get(command, {}).values() for name in listed
          if name not in names]


def usage(command: str, module: ModuleType) -> str:
  """The example that starts the module's docstring: `tfdist train --strategy mirrored ...`."""
  paragraph = " ".join((inspect.getdoc(module) or "").split("\n\n")[0].split())
  if paragraph.startswith("`"):  # "`tfdist doctor`: what it does" -> the command alone.
    paragraph = paragraph[1:].partition("`")[0]
  if paragraph in ("", f"tfdist {command}"):
    return f"tfdist {command} [flags]"
  return paragraph


def command_help(command: str, description: str, module: ModuleType) -> str:
  """What `tfdist COMMAND --help` prints: the description, usage, and the flags by group."""
  lines = [f"tfdist {command}: {description}", "", f"usage: {usage(command, module)}"]
  found = groups(command, module)
  if not found:
    lines += ["", f"tfdist {command} takes no flags of its own: everything after '--' is the "
              "command it runs."]
  for heading, group in found:
    # A FlagValues of the group alone: absl renders it as it renders a module's key flags.
    scratch = flags.FlagValues()
    for flag in group:
      scratch[flag.name] = flag
      scratch.register_flag_by_module(heading, flag)
    lines.append(scratch.module_help(heading))
  lines += ["", f"absl's flags (--verbosity, --flagfile, ...): tfdist {command} --helpfull"]
  return "\n".join(lines)


def unexpected_arguments(command: str, module: ModuleType, arguments: Sequence[str]) -> str:
  """The error for positional arguments a command does not take, with the flag meant."""
  guesses = []
  for word in arguments:
    guesses += [guess for guess in _guesses(word, own_flags(module)) if guess not in guesses]
  names = ", ".join(repr(word) for word in arguments)
  plural = "s" if len(arguments) > 1 else ""
  if guesses:
    advice = f"did you mean {' or '.join(guesses)}?"
  else:
    advice = f"tfdist {command} takes only flags (tfdist {command} --help lists them)."
  return (f"tfdist {command}: unexpected argument{plural} {names}; {advice} "
          f"Received: {list(arguments)}")


def _guesses(word: str, candidates: Sequence[flags.Flag]) -> List[str]:
  """The flags `word` was probably meant for: one it is a value of, or one it names."""
  enums = [flag for flag in candidates
           if word in (getattr(flag.parser, "enum_values", None) or ())]
  if enums:
    return [f"--{flag.name}={word}" for flag in enums]
  name, equals, value = word.lstrip("-").partition("=")
  name = name.replace("-", "_")
  if any(flag.name == name for flag in candidates):
    return [f"--{name}{equals}{value}"]
  return []


def each_command(commands: Mapping[str, str]) -> Iterator[Tuple[str, str, ModuleType]]:
  """(command, description, module) of each command, its module imported in turn.

  The commands share flag names, so each module's flags are deleted from
  absl's FLAGS before the next one is imported. Only for a process that runs
  no command (`tfdist help --markdown FOLDER`), and only once per process.
  """
  for command, description in commands.items():
    module = importlib.import_module(f"tfdist.cli.{command}")
    yield command, description, module
    for flag in flags.FLAGS.get_flags_for_module(module):
      delattr(flags.FLAGS, flag.name)


def reference(commands: Mapping[str, str]) -> Dict[str, str]:
  """The pages docs/reference/cli*.md: every command's flags as markdown tables.

  Returns:
    File name (`REFERENCE_PAGES`' keys) -> the page's markdown.

  Raises:
    ValueError: GROUPS names a flag its command does not define, or REFERENCE_PAGES
      does not list every command once.
  """
  placed = [command for _, _, listed in REFERENCE_PAGES.values() for command in listed]
  if sorted(placed) != sorted(commands):
    raise ValueError("tfdist.cli._help.REFERENCE_PAGES should list every command once. "
                     f"Received: {placed}; the commands: {sorted(commands)}")
  sections = {}
  for command, description, module in each_command(commands):
    stale = stale_group_names(command, module)
    if stale:
      raise ValueError(f"tfdist.cli._help.GROUPS lists flags that tfdist {command} does not "
                       f"define. Received: {stale}")
    lines = ["", f"## tfdist {command}", "", description, "", "```sh",
             usage(command, module), "```"]
    found = groups(command, module)
    if not found:
      lines += ["", "No flags of its own: everything after `--` is the command it runs."]
    for heading, group in found:
      lines += ["", f"**{heading}**", "", "| flag | default | meaning |", "|---|---|---|"]
      lines += [_row(flag) for flag in sorted(group, key=lambda flag: flag.name)]
    sections[command] = lines
  pages = {}
  index = next(iter(REFERENCE_PAGES))
  for name, (title, intro, listed) in REFERENCE_PAGES.items():
    lines = [f"# {title}", "",
             f"<!-- Generated by `{REGENERATE}`; tests/cli/test_main.py checks it. -->", ""]
    if name == index:
      lines += ["Every `tfdist` command is in the table below. Each page gives a command's flags",
                "as `tfdist COMMAND --help` lists them. absl's own flags (`--verbosity`,",
                "`--flagfile`, ...) work with every command: `tfdist COMMAND --helpfull` lists",
                "them too.", "", "| command | what it does |", "|---|---|"]
      for page, (_, _, on_page) in REFERENCE_PAGES.items():
        link = "" if page == index else page
        lines += [f"| [`tfdist {command}`]({link}#tfdist-{command}) | {_cell(commands[command])} |"
                  for command in on_page]
      lines += ["", "Regenerate these pages after changing a flag:", "", "```sh", REGENERATE,
                "```", "", intro]
    else:
      lines += [intro, f"Every command is listed on [Command line]({index})."]
    for command in listed:
      lines += sections[command]
    pages[name] = "\n".join(lines) + "\n"
  return pages


def _row(flag: flags.Flag) -> str:
  """A flag as a row of a markdown table."""
  name = f"--[no]{flag.name}" if flag.boolean else f"--{flag.name}"
  default = flag.default_as_str
  if default is None:
    default = "none"
  elif len(default) > 2 and default[0] == default[-1] and default[0] in "'\"":
    default = default[1:-1]  # absl quotes what it shows as a string.
  meaning = flag.help or ""
  values = re.match(r"<[^<>]*>: ", meaning)  # absl starts an enum's help with `<a|b>: `.
  if values:
    meaning = f"`{values.group(0)[:-2]}`: {_cell(meaning[values.end():])}"
  else:
    meaning = _cell(meaning)
  if flag.parser.syntactic_help:  # In code: `<a|b>` is neither HTML nor two cells.
    meaning += f" (`{flag.parser.syntactic_help}`)"
  return f"| `{name}` | `{default}` | {meaning} |"


def _cell(text: str) -> str:
  """`text` inside a markdown table cell: its pipes escaped, on one line."""
  return " ".join(text.split()).replace("|", "\\|")
