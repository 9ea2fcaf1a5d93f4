"""How users' task modules are imported: T5X's `--module_import` flag, and the modules a gin
file imports (`import tasks`), both with SeqIO's, T5's, TFDS's and TensorFlow's import names
standing for t5forge's (t5forge.compat), so a SeqIO task module runs unchanged. A module that
fails to import is one line naming its file and line, whichever command imported it."""

import importlib
import sys
from pathlib import Path

import t5forge
from t5forge.compat import stand_in_modules
from t5forge.errors import ConfigError, T5ForgeError

# Code that is not the user's: the interpreter's and the environment's, and t5forge itself.
_LIBRARY_DIRS = tuple(
    str(Path(p).resolve()) for p in {sys.prefix, sys.base_prefix, Path(t5forge.__file__).parent}
)


def _is_users(filename: str) -> bool:
    return not filename.startswith("<") and not str(Path(filename).resolve()).startswith(
        _LIBRARY_DIRS
    )


def _innermost_frame(error: BaseException) -> tuple[str, int] | None:
    """(file, line) where `error` was raised, past the import system's own frames."""
    tb, where = error.__traceback__, None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith("<frozen importlib"):
            where = (filename, tb.tb_lineno)
        tb = tb.tb_next
    return where


def explain_import_failure(error: BaseException) -> ConfigError | None:
    """One line for a user's module that failed while it was imported (a syntax error, a
    package it imports that is not installed, an exception its own code raised); None when the
    error is not the module's own (the module itself was not found, or a library failed)."""
    if isinstance(error, SyntaxError) and str(error.filename or "").endswith(".py"):
        return ConfigError(
            f"{error.filename}:{error.lineno}: syntax error in a task module ({error.msg}); "
            "fix the module, then rerun"
        )
    where = _innermost_frame(error)
    if where is None or not _is_users(where[0]):
        return None
    at = f"{where[0]}:{where[1]}"
    if isinstance(error, ModuleNotFoundError):
        # gin re-raises an import error as a copy without `name`; the original is its context.
        missing = error.name or getattr(error.__context__, "name", None) or "a module"
        return ConfigError(
            f"{at}: the task module imports {missing}, which is not installed; install it "
            f"(pip install {missing.partition('.')[0]}, or the package that provides it), or "
            "put the folder holding it on PYTHONPATH"
        )
    message = str(error).splitlines()[0] if str(error) else ""
    return ConfigError(
        f"{at}: the task module raised {type(error).__name__}: {message} while it was imported"
    )


def import_task_modules(modules) -> None:
    """Registers the built-in tasks, then imports each user module (the working dir included)."""
    importlib.import_module("t5forge.tasks")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    with stand_in_modules():
        for module in modules or ():
            try:
                importlib.import_module(module)
            except T5ForgeError:
                raise
            except Exception as e:
                explained = explain_import_failure(e)
                if explained is not None:
                    raise explained from None
                if isinstance(e, ImportError):
                    raise ConfigError(
                        f"--module_import {module!r} failed ({e}); check the module name and "
                        "PYTHONPATH"
                    ) from None
                raise


def register_t5_tasks() -> None:
    """T5's tasks and mixtures (`import t5.data.mixtures` in a T5X gin file)."""
    importlib.import_module("t5forge.tasks.t5_registry.mixtures")
