"""Where an exception was raised: in the user's own code (a task module, its preprocessors,
postprocessors and metrics) or in t5forge and the libraries it runs on.

An exception the user's function raised is the user's to fix, so t5forge reports it as one line
naming the function and the file and line where it was raised; one raised inside t5forge or a
library stays a traceback (a bug to report).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Code that is not the user's: the interpreter's and the environment's, and t5forge itself
# (the package this file is in).
_LIBRARY_DIRS = tuple(
    str(Path(p).resolve()) for p in {sys.prefix, sys.base_prefix, Path(__file__).parent}
)


def _is_users(filename: str) -> bool:
    return not filename.startswith("<") and not str(Path(filename).resolve()).startswith(
        _LIBRARY_DIRS
    )


def raised_at(error: BaseException) -> tuple[str, int] | None:
    """(file, line) where `error` was raised, past the import system's own frames."""
    tb, where = error.__traceback__, None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith("<frozen importlib"):
            where = (filename, tb.tb_lineno)
        tb = tb.tb_next
    return where


def raised_in_user_code(error: BaseException) -> str | None:
    """'path/to/tasks.py:12' when the user's own code raised `error`, else None."""
    where = raised_at(error)
    return f"{where[0]}:{where[1]}" if where and _is_users(where[0]) else None


def described(error: BaseException) -> str:
    """'KeyError: 'question'': the exception's type and the first line of its message."""
    message = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
