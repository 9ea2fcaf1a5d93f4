"""Quiet the stray leftovers of a checkpoint read that already failed.

Orbax reads the arrays of a checkpoint as many TensorStore reads inside one event loop, and
stops waiting as soon as one read fails. The other reads still finish afterwards, and Python
reports each through one of two channels, neither of which says anything the failed read's
one-line warning does not:
- a read completing after the loop closed: its callback raises RuntimeError('Event loop is
  closed'), printed as an unraisable exception (a damaged checkpoint buried its warning under
  ~250 of these tracebacks);
- a read failing on the same damage with nobody left to collect it: asyncio logs "Task
  exception was never retrieved" with the TensorStore error and its traceback.
Both are dropped; every other unraisable exception and asyncio log record passes as before.
The filters are installed before a read, not after it fails: the first leftovers can beat the
except clause.
"""

from __future__ import annotations

import logging
import sys
import traceback

_installed = False


def _is_stray_completion(unraisable) -> bool:
    error = unraisable.exc_value
    if not (isinstance(error, RuntimeError) and str(error) == "Event loop is closed"):
        return False
    return any(f.name == "call_soon_threadsafe" for f in traceback.extract_tb(error.__traceback__))


class _UncollectedReadFailures(logging.Filter):
    """Drops asyncio's report of a TensorStore operation's failure that nobody awaited."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Task exception was never retrieved"):
            return True
        error = record.exc_info[1] if record.exc_info else None
        return "tensorstore_spec=" not in str(error)


def drop_stray_completions() -> None:
    """Called before a checkpoint read; installs both filters once per process."""
    global _installed
    if _installed:
        return
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if not _is_stray_completion(unraisable):
            previous(unraisable)

    sys.unraisablehook = hook
    logging.getLogger("asyncio").addFilter(_UncollectedReadFailures())
    _installed = True
