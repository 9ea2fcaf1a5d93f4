"""Every command's `--help` names the command, so its usage line can be pasted back as typed."""

import pytest
from commands import t5forge_in_process

from t5forge.cli.main import COMMANDS


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "vocab"] + ["vocab train"])
def test_help_usage_names_the_command(command, capsys):
    try:
        code = t5forge_in_process(*command.split(), "--help")
    except SystemExit as exit_:  # argparse's own --help exits
        code = exit_.code
    assert code in (0, None)
    assert f"usage: t5forge {command}" in capsys.readouterr().out
