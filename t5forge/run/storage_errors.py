"""A full disk or a read-only file system, recognised whichever library hit it.

Python raises OSError, but TensorStore (orbax's array writer) raises ValueError ending in
"[os_error_code='28']", safetensors "(os error 28)" and ArrayRecord (cache-tasks) a
RuntimeError with only the C library's text ("write() failed: No space left on device"); gin
re-raises through a proxy whose OSError fields are empty. These are the environment's problem, not a bug: the caller turns
them into one line saying what could not be written and what to do.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import sys
import threading
import warnings

STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})
_CODE_IN_TEXT = re.compile(r"os_error_code='(\d+)'|\(os error (\d+)\)")
_STRERROR = {os.strerror(code): code for code in STORAGE_ERRNOS}


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
    if code is None and not isinstance(error, OSError):
        code = next((c for text, c in _STRERROR.items() if text in str(error)), None)
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


def _loop_closed(error: BaseException | None) -> bool:
    """Whether `error` is a callback posting to orbax's event loop after it was closed."""
    return isinstance(error, RuntimeError) and "Event loop is closed" in str(error)


class StorageFailureEcho:
    """Silences the background writers' echoes of a full or read-only disk, from the run's start
    through interpreter shutdown.

    When a checkpoint save hits ENOSPC or EROFS, orbax's writer threads log it with a traceback
    (absl), TensorStore's callbacks then post to orbax's closed event loop ("Event loop is
    closed", through the exception hooks), asyncio logs the never-retrieved writes and Python
    warns of the writes never awaited: dozens of tracebacks around the run's one-line report.
    Records and hook calls whose exception is a storage failure are dropped. The "Event loop is
    closed" errors and asyncio's errors may come before any storage failure is seen (orbax's
    own writes fail inside its loop, reaching only the main thread), so until the run's outcome
    is known they are held, and `remove()` prints them only if it was no storage failure.
    After a storage failure the hooks and filters stay, dropping only its echoes, because the
    never-retrieved writes are logged when garbage collection reaches them at exit.
    `install()` when the run starts writing, `remove()` in its `finally`.
    """

    _LOGGERS = ("absl", "asyncio")

    def __init__(self, hold_all: bool = False):
        """`hold_all`: hold every echo while running, not only a closed loop's (a checkpoint
        restore, whose failed reads orbax logs before the caller knows the checkpoint is
        damaged)."""
        self.hold_all = hold_all
        self.failed = False
        self._running = False
        self._held = []  # replays of echoes put off until the run's outcome is known
        # Reentrant: garbage collection inside it can finalize a task that logs to asyncio.
        self._lock = threading.RLock()

    def _passes(self, error: BaseException | None, leftover: bool, replay) -> bool:
        """Whether an echo of `error` goes out now; `leftover` marks asyncio's error records,
        and `replay` prints the echo later if it is held."""
        with self._lock:
            if _storage_failure(error):
                self._fail()
                return False
            held = _loop_closed(error) or (self._running and (leftover or self.hold_all))
            if not held:
                return True
            if self._running and not self.failed:
                self._held.append(replay)
            return not (self._running or self.failed)

    def _fail(self) -> None:
        if not self.failed:
            self.failed = True
            self._held.clear()
            warnings.filterwarnings(
                "ignore", message=r"coroutine '.*' was never awaited", category=RuntimeWarning
            )

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        leftover = record.name == "asyncio" and record.levelno >= logging.ERROR
        logger = logging.getLogger(record.name)
        return self._passes(error, leftover, lambda: logger.handle(record))

    def install(self) -> None:
        self._running = True
        self._hooks = (sys.excepthook, threading.excepthook, sys.unraisablehook)
        previous_except, previous_thread, previous_unraisable = self._hooks

        def except_hook(kind, error, traceback):
            if self._passes(error, False, lambda: previous_except(kind, error, traceback)):
                previous_except(kind, error, traceback)

        def thread_hook(args):
            if self._passes(args.exc_value, False, lambda: previous_thread(args)):
                previous_thread(args)

        def unraisable_hook(args):
            if self._passes(args.exc_value, False, lambda: previous_unraisable(args)):
                previous_unraisable(args)

        sys.excepthook, threading.excepthook, sys.unraisablehook = (
            except_hook,
            thread_hook,
            unraisable_hook,
        )
        for name in self._LOGGERS:
            logging.getLogger(name).addFilter(self)

    def expect_failures(self) -> None:
        """Drops the echoes of failures the caller has already reported (a damaged checkpoint
        skipped with a warning: TensorStore's reads of it post to a closed event loop), now
        and through exit, as a storage failure's."""
        with self._lock:
            self._fail()

    def remove(self) -> None:
        """Ends the run. Called from train's `finally`, so the exception ending the run, if
        any, is the one being handled: a storage failure there drops the held echoes."""
        with self._lock:
            self._running = False
            if _storage_failure(sys.exc_info()[1]):
                self._fail()
            held, self._held = self._held, []
        if self.failed:
            return
        sys.excepthook, threading.excepthook, sys.unraisablehook = self._hooks
        for name in self._LOGGERS:
            logging.getLogger(name).removeFilter(self)
        for replay in held:
            replay()
