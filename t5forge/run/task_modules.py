"""`--module_import` (T5X's flag): import the modules that register users' tasks and mixtures."""

import importlib
import sys
from pathlib import Path

from t5forge.errors import ConfigError


def import_task_modules(modules) -> None:
    """Registers the built-in tasks, then imports each user module (the working dir included)."""
    importlib.import_module("t5forge.tasks")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    for module in modules or ():
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(
                f"--module_import {module!r} failed ({e}); check the module name and PYTHONPATH"
            ) from None
