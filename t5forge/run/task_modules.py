"""How users' task modules are imported: T5X's `--module_import` flag, and the modules a gin
file imports (`import tasks`), both with SeqIO's, T5's, TFDS's and TensorFlow's import names
standing for t5forge's (t5forge.compat), so a SeqIO task module runs unchanged."""

import importlib
import sys
from pathlib import Path

from t5forge.compat import stand_in_modules
from t5forge.errors import ConfigError


def import_task_modules(modules) -> None:
    """Registers the built-in tasks, then imports each user module (the working dir included)."""
    importlib.import_module("t5forge.tasks")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    with stand_in_modules():
        for module in modules or ():
            try:
                importlib.import_module(module)
            except ImportError as e:
                raise ConfigError(
                    f"--module_import {module!r} failed ({e}); check the module name and PYTHONPATH"
                ) from None


def register_t5_tasks() -> None:
    """T5's tasks and mixtures (`import t5.data.mixtures` in a T5X gin file)."""
    importlib.import_module("t5forge.tasks.t5_registry.mixtures")
