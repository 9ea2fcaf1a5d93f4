"""Every command's `--help` names the command, so its usage line can be pasted back as typed."""

import pytest
from commands import python, t5forge_in_process

from t5forge.cli.main import COMMANDS


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "vocab"] + ["vocab train"])
def test_help_usage_names_the_command(command, capsys):
    try:
        code = t5forge_in_process(*command.split(), "--help")
    except SystemExit as exit_:  # argparse's own --help exits
        code = exit_.code
    assert code in (0, None)
    assert f"usage: t5forge {command}" in capsys.readouterr().out


WHAT_WAS_IMPORTED = """
import sys
from t5forge.cli import main
{action}
heavy = sorted(m for m in ("jax", "nltk", "scipy", "rouge_score", "sacrebleu") if m in sys.modules)
print(",".join(heavy))
"""


def test_the_command_list_imports_no_command_module():
    """`t5forge --help` lists the commands from cli/commands.py, without JAX (seconds)."""
    result = python("-c", WHAT_WAS_IMPORTED.format(action="main.main(['--help'])"), check=True)
    assert "usage: t5forge <command>" in result.stdout
    assert result.stdout.splitlines()[-1] == ""


def test_a_command_naming_tasks_leaves_the_scorers_unimported():
    """The metrics' scorers (rouge-score pulls nltk and scipy, a second) load when they score."""
    action = "import t5forge.cli.train, t5forge.tasks.builtin"
    result = python("-c", WHAT_WAS_IMPORTED.format(action=action), check=True)
    assert result.stdout.splitlines()[-1] == "jax"
