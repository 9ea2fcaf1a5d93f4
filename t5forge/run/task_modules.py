"""How users' task modules are imported: T5X's `--module_import` flag, and the modules a gin
file imports (`import tasks`), both with SeqIO's, T5's, TFDS's and TensorFlow's import names
standing for t5forge's (t5forge.compat), so a SeqIO task module runs unchanged. A module that
fails to import is one line naming its file and line, whichever command imported it."""

import importlib
import sys
from pathlib import Path

from t5forge.compat import stand_in_modules
from t5forge.errors import ConfigError, T5ForgeError
from t5forge.user_code import described, raised_in_user_code


def explain_import_failure(error: BaseException) -> ConfigError | None:
    """One line for a user's module that failed while it was imported (a syntax error, a
    package it imports that is not installed, an exception its own code raised); None when the
    error is not the module's own (the module itself was not found, or a library failed)."""
    if isinstance(error, SyntaxError) and str(error.filename or "").endswith(".py"):
        return ConfigError(
            f"{error.filename}:{error.lineno}: syntax error in a task module ({error.msg}); "
            "fix the module, then rerun"
        )
    at = raised_in_user_code(error)
    if at is None:
        return None
    if isinstance(error, ModuleNotFoundError):
        # gin re-raises an import error as a copy without `name`; the original is its context.
        missing = error.name or getattr(error.__context__, "name", None) or "a module"
        return ConfigError(
            f"{at}: the task module imports {missing}, which is not installed; install it "
            f"(pip install {missing.partition('.')[0]}, or the package that provides it), or "
            "put the folder holding it on PYTHONPATH"
        )
    return ConfigError(f"{at}: the task module raised {described(error)} while it was imported")


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
    importlib.import_module("t5forge.t5.data.mixtures")
