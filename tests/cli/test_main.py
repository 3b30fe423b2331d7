"""`tfdist <command>`: the dispatcher's usage, unknown commands and exit codes."""

import helpers


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
