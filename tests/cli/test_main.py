"""`tfdist <command>`: the dispatcher's usage, unknown commands, help, arguments and exit codes."""

import json
import os
import re
import subprocess
import sys

import pytest

import helpers
from tfdist.cli import _help
from tfdist.cli import main


def test_unknown_command_lists_valid_ones():
  result = helpers.run(helpers.tfdist_cli("lunch"), timeout=60)
  assert result.returncode == 2
  assert ("unknown command 'lunch'. Valid commands: ['advise', 'bench', 'compare', 'data_service', "
          "'doctor', 'explain', 'launch', 'scale', 'task', 'train', 'verify']") \
      in result.stdout


def test_help_lists_every_command_and_exits_0_and_no_command_exits_2():
  done = helpers.run(helpers.tfdist_cli("--help"), timeout=60)
  assert done.returncode == 0
  for command in ("advise", "bench", "compare", "data_service", "doctor", "explain", "launch",
                  "scale", "task", "train", "verify"):
    assert f"  {command} " in done.stdout, command
  assert helpers.run(helpers.tfdist_cli(), timeout=60).returncode == 2


# --- each command's help, refused positional arguments, the reference page ------

# Every command's help, rendered in one process (importing each main in turn:
# they share flag names), as `tfdist COMMAND --help` prints it.
_ALL_HELP = """
import json
from tfdist.cli import _help, main
helps, stale = {}, {}
for command, description, module in _help.each_command(main.COMMANDS):
  helps[command] = _help.command_help(command, description, module)
  stale[command] = _help.stale_group_names(command, module)
print(json.dumps({"helps": helps, "stale": stale}))
"""


def _stdout(command, timeout):
  """`command`'s stdout alone (TensorFlow writes its start-up lines to stderr)."""
  done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                        cwd=helpers.REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
                        stdin=subprocess.DEVNULL)
  assert done.returncode == 0, done.stderr[-3000:]
  return done.stdout


@pytest.fixture(scope="module")
def helps():
  found = json.loads(_stdout([sys.executable, "-c", _ALL_HELP], timeout=300))
  assert not any(found["stale"].values()), (
      f"tfdist.cli._help.GROUPS names flags the command does not define: {found['stale']}")
  return found["helps"]


def _defined_flags(command):
  """The flags a command's module defines by a literal name, read from its source."""
  with open(os.path.join(helpers.REPO, "tfdist", "cli", f"{command}.py")) as f:
    return re.findall(r"DEFINE_\w+\(\s*\"(\w+)\"", f.read())


@pytest.mark.slow
@pytest.mark.parametrize("command", list(main.COMMANDS))
def test_each_command_help_lists_its_own_flags_under_its_description(command, helps):
  text = helps[command]
  assert text.startswith(f"tfdist {command}: {main.COMMANDS[command]}\n\nusage: tfdist "
                         f"{command}"), text[:300]
  defined = _defined_flags(command)
  if not defined:  # `tfdist task` takes only the command after '--'.
    assert f"tfdist {command} takes no flags of its own" in text
    return
  missing = [name for name in defined if not re.search(rf"^ *--(\[no\])?{name}:", text, re.M)]
  assert not missing, f"tfdist {command} --help does not list {missing}:\n{text}"


def test_flags_are_grouped_under_headings(helps):
  headings = re.findall(r"^(\w[\w ,]*):$", helps["train"], re.M)
  assert headings == ["what to run", "cluster", "output", "advanced"], headings
  assert re.findall(r"^(\w[\w ,]*):$", helps["explain"], re.M) == ["options"]


@pytest.mark.slow
def test_command_help_and_help_command_print_it_and_exit_0(helps):
  done = helpers.run(helpers.tfdist_cli("launch", "--help"), timeout=60)
  assert done.returncode == 0, done.stdout[-3000:]
  assert done.stdout == helps["launch"] + "\n"  # The same text as rendered in one process.
  done = helpers.run(helpers.tfdist_cli("help", "train"), timeout=120)
  assert done.returncode == 0, done.stdout[-3000:]
  assert helps["train"] in done.stdout
  done = helpers.run(helpers.tfdist_cli("explain", "-h"), timeout=60)
  assert done.returncode == 0 and helps["explain"] in done.stdout, done.stdout[-3000:]


def test_every_command_s_help_comes_without_importing_tensorflow():
  # A user who types --help waits for no TensorFlow import (seconds, more on a busy node).
  code = ("import atexit, runpy, sys; atexit.register(lambda: print('IMPORTED', sorted(m for m "
          "in ('tensorflow', 'keras', 'tf_keras') if m in sys.modules))); "
          "sys.argv = ['tfdist'] + sys.argv[1:]; runpy.run_module('tfdist', run_name='__main__')")
  imported = {}
  for command in main.COMMANDS:
    done = helpers.run([sys.executable, "-c", code, command, "--help"], timeout=60)
    assert done.returncode == 0, (command, done.stdout[-2000:])
    imported[command] = done.stdout.splitlines()[-1]
  assert imported == {command: "IMPORTED []" for command in main.COMMANDS}


def test_help_after_the_double_dash_is_the_launched_commands():
  assert main._asks_for_help(["--workers=2", "--help"])
  assert not main._asks_for_help(["--workers=2", "--", "python", "train.py", "--help"])


@pytest.mark.slow
def test_a_positional_argument_is_refused_with_the_flag_it_was_meant_for():
  done = helpers.run(helpers.tfdist_cli("train", "mirrored"), timeout=120)
  assert done.returncode == 2, done.stdout[-3000:]
  assert ("tfdist train: unexpected argument 'mirrored'; did you mean --strategy=mirrored? "
          "Received: ['mirrored']") in done.stdout
  done = helpers.run(helpers.tfdist_cli("explain", "workers=2", "64"), timeout=60)
  assert done.returncode == 2, done.stdout[-3000:]
  assert ("tfdist explain: unexpected arguments 'workers=2', '64'; did you mean --workers=2? "
          "Received: ['workers=2', '64']") in done.stdout
  done = helpers.run(helpers.tfdist_cli("explain", "digits"), timeout=60)
  assert done.returncode == 2, done.stdout[-3000:]
  assert ("tfdist explain: unexpected argument 'digits'; tfdist explain takes only flags "
          "(tfdist explain --help lists them). Received: ['digits']") in done.stdout


@pytest.mark.slow
def test_the_cli_reference_pages_are_generated_from_the_flags(tmp_path):
  _stdout(helpers.tfdist_cli("help", "--markdown", str(tmp_path)), timeout=300)
  assert sorted(os.listdir(tmp_path)) == sorted(_help.REFERENCE_PAGES)
  generated = ""
  for name in _help.REFERENCE_PAGES:
    page = (tmp_path / name).read_text(encoding="utf-8")
    with open(os.path.join(helpers.REPO, _help.REFERENCE_FOLDER, name), encoding="utf-8") as f:
      committed = f.read()
    assert page == committed, (f"{_help.REFERENCE_FOLDER}/{name} is not what the flags say; "
                               f"regenerate it: {_help.REGENERATE}")
    generated += page
  for command in main.COMMANDS:
    assert generated.count(f"\n## tfdist {command}\n") == 1, command


# --- renamed flags: refused with the new name, before anything is imported -----

@pytest.mark.parametrize("command, argument, new", [
    ("train", "--devices=2", "--devices_per_worker"),
    ("train", "--result_file=r.json", "--output"),
    ("verify", "--devices", "--devices_per_worker"),
    ("verify", "--result_file=r.json", "--output"),
    ("explain", "--replicas_per_worker=2", "--devices_per_worker"),
    ("scale", "--batch_size=64", "--per_replica_batch_size"),
    ("advise", "-batch_size=64", "--per_replica_batch_size"),
    ("compare", "--local_sgd=1,4,16", "--sync_every"),
    ("launch", "--workdir=/tmp/job", "--work_dir"),
])
def test_a_renamed_flag_is_refused_with_its_new_name(command, argument, new, capsys,
                                                     monkeypatch):
  monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")  # main.run sets it; restored after.
  with pytest.raises(SystemExit) as exited:
    main.run(["tfdist", command, "--epochs=1", argument, "--", "python", "x.py"])
  assert exited.value.code == 2
  old = argument.lstrip("-").partition("=")[0]
  assert capsys.readouterr().err == (f"tfdist {command}: --{old} was renamed {new}. "
                                     f"Received: {argument}\n")


def test_renamed_flags_are_read_as_absl_reads_flags_and_only_the_commands_own():
  assert main.renamed_flag("train", ["--nodevices"]) == (
      "tfdist train: --devices was renamed --devices_per_worker. Received: --nodevices")
  assert main.renamed_flag("launch", ["--workers=2", "--", "python", "x.py", "--workdir=x"]) \
      is None
  assert main.renamed_flag("train", ["--batch_size=64", "--devices_per_worker=2"]) is None
  assert main.renamed_flag("doctor", ["--devices=2"]) is None  # absl names an unknown flag.


@pytest.mark.parametrize("command", sorted(main.RENAMED))
def test_each_renamed_flag_is_gone_and_its_new_name_defined(command):
  defined = _defined_flags(command)
  for old, new in main.RENAMED[command].items():
    assert new in defined and old not in defined, (command, old, new)


# A main passes what it was told as arguments and options, never through its own
# environment (issue 52). The one write left here: the program's own TensorFlow log
# level, a default the user's setting overrides, before TensorFlow starts. (`tfdist
# train --keras` still sets TF_USE_LEGACY_KERAS for its process, through
# keras_support.select: TensorFlow reads the Keras to use from there and nowhere else.)
ENVIRONMENT_WRITE = re.compile(
    r"os\.environ\[[^\]]+\]\s*=(?!=)|os\.environ\.(update|pop|setdefault|clear)\(|os\.putenv|"
    r"del os\.environ")
ALLOWED_WRITES = {("main.py", 'os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")')}


def test_no_main_writes_its_own_environment():
  cli = os.path.join(helpers.REPO, "tfdist", "cli")
  writes = set()
  for name in sorted(os.listdir(cli)):
    if name.endswith(".py"):
      with open(os.path.join(cli, name)) as f:
        writes |= {(name, line.strip()) for line in f if ENVIRONMENT_WRITE.search(line)}
  assert writes == ALLOWED_WRITES, writes - ALLOWED_WRITES


@pytest.mark.slow
def test_without_tf_keras_a_command_that_needs_it_says_so_in_a_line_and_exits_2():
  # Keras 3 alone: `scale` says so before its workers start (NEEDS_TF_KERAS); `advise` from
  # where its models import tf_keras (the same line from run_main, instead of a traceback).
  env = helpers.without_tf_keras()
  for command, what in [(["scale"], "this command"),
                        (["advise", "--model=cnn"], "this command (or the code it runs)")]:
    result = helpers.run(helpers.tfdist_cli(*command), timeout=120, env=env)
    assert result.returncode == 2, result.stdout[-3000:]
    assert f"tfdist {command[0]}: {what} needs tf_keras, which is not installed. Install the " \
           "one of your TensorFlow's minor version: pip install 'tf-keras==" in result.stdout
    assert "or use Keras 3" not in result.stdout and "Traceback" not in result.stdout
