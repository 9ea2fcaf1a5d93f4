"""One file of a walk over T5X's or Flaxformer's gin files: parsed and checked in this
process as its command would, and the outcome held against its row of the table."""

from __future__ import annotations

import re

import gin
from t5x_gin_states import RUNS

from t5forge.cli import run_flags
from t5forge.errors import ConfigError


def refusal_of(command: str, args: list[str]) -> ConfigError | None:
    """The one-line refusal of `t5forge <command> <args>`'s configuration, or None."""
    gin.clear_config()
    try:
        run_flags.configure_run(args, "", command)
        return None
    except ConfigError as error:
        return error
    finally:
        gin.clear_config()


def check_outcome(path: str, command: str, args: list[str], state, capsys) -> None:
    """It runs where the row says so; otherwise one line, `file:line: ...`, with the row's
    words; stderr holds warning and error lines only."""
    error = refusal_of(command, args)
    refusal = None if error is None else str(error)
    err = capsys.readouterr().err
    assert all(line.startswith(("warning: ", "error: ")) for line in err.splitlines()), err
    if state == RUNS:
        assert refusal is None, refusal
        return
    assert refusal is not None, f"{path} parses now: mark it {RUNS!r} in its states table"
    assert "\n" not in refusal and state.says in refusal, refusal
    assert re.match(r"\S+\.gin:\d+: ", refusal), refusal
