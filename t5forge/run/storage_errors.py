"""A full disk or a read-only file system, recognised whichever library hit it.

Python raises OSError, but TensorStore (orbax's array writer) raises ValueError ending in
"[os_error_code='28']" and safetensors "(os error 28)"; gin re-raises through a proxy whose
OSError fields are empty. These are the environment's problem, not a bug: the caller turns
them into one line saying what could not be written and what to do.
"""

from __future__ import annotations

import errno
import logging
import re
import sys
import threading

STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})
_CODE_IN_TEXT = re.compile(r"os_error_code='(\d+)'|\(os error (\d+)\)")


def original_attribute(error: BaseException, name: str):
    """`error.<name>` of the exception itself, also through gin's proxy (whose __getattr__
    reaches the original while the built-in OSError fields read None)."""
    value = getattr(error, name, None)
    forward = getattr(type(error), "__getattr__", None)
    return forward(error, name) if value is None and forward is not None else value


def storage_errno(error: BaseException) -> int | None:
    """ENOSPC, EROFS, ... behind `error`, or None when it is not a storage failure."""
    code = original_attribute(error, "errno") if isinstance(error, OSError) else None
    if code is None:
        match = _CODE_IN_TEXT.search(str(error))
        code = int(match.group(1) or match.group(2)) if match else None
    return code if code in STORAGE_ERRNOS else None


def _storage_failure(error: BaseException | None) -> bool:
    """Whether `error`, or an exception it was raised from, is a full or read-only disk."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if storage_errno(error) is not None:
            return True
        error = error.__cause__ or error.__context__
    return False


class StorageFailureEcho:
    """Silences the background writers' echoes of a full or read-only disk during a run.

    When a checkpoint save hits ENOSPC or EROFS, orbax's writer threads log it with a traceback
    (absl), TensorStore's callbacks then post to orbax's closed event loop ("Event loop is
    closed", through the exception hooks) and asyncio logs the never-retrieved writes: dozens of
    tracebacks before the run reports the failure in one line. Inside this context those are
    dropped: records and hook calls whose exception is a storage failure, and once one was seen,
    the "Event loop is closed" errors and asyncio's leftovers that follow it. Anything else
    still reaches the user. `install()` when the run starts writing, `remove()` when it is done.
    """

    _LOGGERS = ("absl", "asyncio")

    def __init__(self):
        self.failed = False

    def _is_echo(self, error: BaseException | None) -> bool:
        if _storage_failure(error):
            self.failed = True
            return True
        return (
            self.failed
            and isinstance(error, RuntimeError)
            and ("Event loop is closed" in str(error))
        )

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if self._is_echo(error):
            return False
        # asyncio names a lost write without attaching it as exc_info in some versions.
        return not (self.failed and record.name == "asyncio")

    def install(self) -> None:
        self._hooks = (sys.excepthook, threading.excepthook, sys.unraisablehook)
        previous_except, previous_thread, previous_unraisable = self._hooks

        def except_hook(kind, error, traceback):
            if not self._is_echo(error):
                previous_except(kind, error, traceback)

        def thread_hook(args):
            if not self._is_echo(args.exc_value):
                previous_thread(args)

        def unraisable_hook(args):
            if not self._is_echo(args.exc_value):
                previous_unraisable(args)

        sys.excepthook, threading.excepthook, sys.unraisablehook = (
            except_hook,
            thread_hook,
            unraisable_hook,
        )
        for name in self._LOGGERS:
            logging.getLogger(name).addFilter(self)

    def remove(self) -> None:
        sys.excepthook, threading.excepthook, sys.unraisablehook = self._hooks
        for name in self._LOGGERS:
            logging.getLogger(name).removeFilter(self)
