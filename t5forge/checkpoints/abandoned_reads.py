"""Quiet the stray completions of a checkpoint read that already failed.

Orbax reads the arrays of a checkpoint as many TensorStore reads inside one event loop, and
closes that loop as soon as one read fails. The reads still in flight complete afterwards, and
each completion's callback raises RuntimeError('Event loop is closed'), which Python prints as
an unraisable exception: a damaged checkpoint buried its one-line warning under ~250
tracebacks. Those completions belong to a read already reported as failed, so once a read has
failed they are dropped; every other unraisable exception is printed as before. The filter is
installed before a read, not after it fails: the first completions can beat the except clause.
"""

from __future__ import annotations

import sys
import traceback

_installed = False


def _is_stray_completion(unraisable) -> bool:
    error = unraisable.exc_value
    if not (isinstance(error, RuntimeError) and str(error) == "Event loop is closed"):
        return False
    return any(f.name == "call_soon_threadsafe" for f in traceback.extract_tb(error.__traceback__))


def drop_stray_completions() -> None:
    """Called before a checkpoint read; installs the filter once per process."""
    global _installed
    if _installed:
        return
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if not _is_stray_completion(unraisable):
            previous(unraisable)

    sys.unraisablehook = hook
    _installed = True
