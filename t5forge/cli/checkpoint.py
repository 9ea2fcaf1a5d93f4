"""`t5forge checkpoint verify PATH`: checks one checkpoint before you rely on it.

Compares every file with the checksums recorded when it was saved, reads the metadata and every
array back, and checks that all values are finite; one line says what is wrong, if anything.
"""

from __future__ import annotations

import argparse

from t5forge.cli.commands import COMMANDS

HELP = COMMANDS["checkpoint"].summary


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t5forge checkpoint", description=HELP)
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser(
        "verify",
        help="verify one checkpoint",
        description="Verify a checkpoint_<step> directory (or a model dir's latest checkpoint): "
        "exit 0 and one 'ok' line, or exit 2 and one 'error:' line naming the damaged file.",
    )
    verify.add_argument("path", help="checkpoint_<step> directory or model directory")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from t5forge.checkpoints.step_dir import verify_checkpoint

    print(verify_checkpoint(args.path))
    return 0
