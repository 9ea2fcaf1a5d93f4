"""SeqIO's, T5's, TFDS's and TensorFlow's import names for users' task modules.

A T5X user's `tasks.py` says `import seqio`, `import tensorflow_datasets as tfds`,
`from t5.data import preprocessors`, `from t5.evaluation import metrics`. While t5forge imports
task modules (`--module_import`, a gin file's `import tasks`) those names are t5forge's:
`stand_in_modules()` puts a finder in front of `sys.meta_path` that serves them from
t5forge, whether or not the real packages are installed, because a task registered in a real
`seqio` would be a tf.data task in another registry that t5forge's commands never see. The
finder and the names leave `sys.modules` afterwards (what was there before comes back), so
libraries that import the real packages later get them; the task modules keep the modules
they imported. From Python, `with t5forge.compat.stand_in_modules(): import tasks`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Mapping
from pathlib import Path

# SeqIO/T5/TFDS/TensorFlow module name -> the t5forge module that stands in for it.
STAND_INS = {
    "seqio": "t5forge.seqio",
    "seqio.dataset_providers": "t5forge.seqio.dataset_providers",
    "seqio.evaluation": "t5forge.data.evaluator",
    "seqio.experimental": "t5forge.seqio.experimental",
    "seqio.feature_converters": "t5forge.seqio.feature_converters",
    "seqio.loggers": "t5forge.seqio.loggers",
    "seqio.metrics": "t5forge.data.metrics",
    "seqio.preprocessors": "t5forge.seqio.preprocessors",
    "seqio.utils": "t5forge.seqio.utils",
    "seqio.vocabularies": "t5forge.seqio.vocabularies",
    "tensorflow": "t5forge.compat.tensorflow",
    "tensorflow.compat": "t5forge.compat.tensorflow",
    "tensorflow.compat.v1": "t5forge.compat.tensorflow",
    "tensorflow.compat.v2": "t5forge.compat.tensorflow",
    "tensorflow_datasets": "t5forge.compat.tensorflow_datasets",
}


def _t5_port() -> dict[str, str]:
    """T5's names by rule: `t5.X` is t5forge.t5.X, for every module under t5forge/t5/."""
    package = __name__.partition(".")[0]
    root = Path(__file__).resolve().parent.parent / "t5"
    names = {}
    for path in sorted(root.rglob("*.py")):
        name = ".".join(["t5", *path.relative_to(root).with_suffix("").parts])
        name = name.removesuffix(".__init__")
        names[name] = f"{package}.{name}"
    return names


STAND_INS.update(_t5_port())


# Importing these registers T5's tasks, so gin's `import t5.data.mixtures` imports them too.
REGISTRY_MODULES = ("t5.data.tasks", "t5.data.mixtures")


class _AliasLoader(importlib.abc.Loader):
    """Loads a stand-in name as the already importable t5forge module behind it."""

    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):
        """The t5forge module ran when it was imported under its own name."""


class _StandInFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in STAND_INS:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(STAND_INS[fullname]))


def _falls_back_to_stand_in(gin_module: types.ModuleType, name: str) -> None:
    """A gin stand-in module (t5forge.gin_config.t5x_compat) answers the names it lacks from
    t5forge's SeqIO/T5 module, so `seqio.Feature` works in a task module gin imports."""

    def fallback(attribute: str):
        return getattr(importlib.import_module(STAND_INS[name]), attribute)

    gin_module.__getattr__ = fallback


@contextlib.contextmanager
def stand_in_modules(gin_modules: Mapping[str, types.ModuleType] | None = None):
    """SeqIO's, T5's, TFDS's and TensorFlow's names import t5forge's modules inside the
    block. `gin_modules` (T5X's names that gin parses with) stay, falling back to these
    modules for the names they lack, except T5's registry modules, which are t5forge's."""
    finder = _StandInFinder()
    saved = {name: sys.modules.pop(name) for name in STAND_INS if name in sys.modules}
    for name, module in (gin_modules or {}).items():
        if name in STAND_INS and name not in REGISTRY_MODULES:
            sys.modules[name] = module
            _falls_back_to_stand_in(module, name)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for module in (gin_modules or {}).values():
            module.__dict__.pop("__getattr__", None)
        for name in STAND_INS:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
