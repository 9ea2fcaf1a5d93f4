"""T5X's and Flaxformer's module names (`t5x.utils`, `seqio`, `__main__`,
`flaxformer.components.dense`, ...) for gin, and only while gin parses.

A T5X gin file says `from t5x import utils` and then `utils.DatasetConfig.batch_size = 128`;
with dynamic registration gin imports the module and looks the attribute up. Each T5X name of
t5forge.gin_config.t5x_compat.names is registered with gin once, and `t5x_module_names()` puts
modules holding them in `sys.modules` for the duration of a parse, then puts back whatever
was there (a real `seqio`, the real `__main__`). Nothing called `t5x` or `seqio` stays
importable afterwards; `from t5forge import seqio` is t5forge's own module, a different name.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import types

import gin

import t5forge.gin_config.gin_registry  # noqa: F401  (registers the twins the T5X names forward to)
from t5forge.compat import stand_in_modules
from t5forge.gin_config import gin_internals
from t5forge.gin_config.t5x_compat.name_entry import BOUND_WITHOUT_IMPORT, T5XName
from t5forge.gin_config.t5x_compat.names import (
    MODULE_ALIASES,
    MODULE_CONSTANTS,
    NAMES,
    TASK_MODULES,
)

FAKE_ROOTS = ("__main__", "t5x", "seqio", "t5", "flaxformer")


def _forwarding(entry: T5XName):
    """A callable with the T5X name's parameters that calls its twin (bindings moved there)."""

    def forward(**unused):
        twin = gin.get_configurable(entry.twin)
        return twin if entry.returns_twin else twin()

    return forward


def _with_rule_signature(fn, entry: T5XName):
    """gin checks parameter names against the signature: T5X's, i.e. the rules' keys."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        fn.__signature__ = inspect.Signature(
            [
                inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None)
                for name in entry.parameters()
            ]
        )
    return fn


def _register(entry: T5XName):
    """The object gin finds under the T5X name: the unwrapped function or class, which gin's
    dynamic registration recognises as already registered."""
    if entry.same_object:
        return gin_internals.registered_object(entry.twin)
    fn = _with_rule_signature(entry.build or _forwarding(entry), entry)
    module, _, name = entry.gin_selector.rpartition(".")
    gin.external_configurable(fn, name=name, module=module)
    if entry.twin and name in BOUND_WITHOUT_IMPORT:
        _keep_bare_name_for_t5forge(name, entry.gin_selector)
    return fn


def _keep_bare_name_for_t5forge(name: str, t5x_selector: str) -> None:
    """`T5Config.emb_dim` (what t5forge's files and flags write) keeps naming t5forge's
    configurable beside T5X's `network.T5Config`."""
    others = [s for s in gin_internals.selectors_ending_with(name) if s != t5x_selector]
    if len(others) == 1:
        gin_internals.add_exact_name(name, others[0])


def _build_modules() -> dict[str, types.ModuleType]:
    modules: dict[str, types.ModuleType] = {}

    def module(path: str) -> types.ModuleType:
        if path not in modules:
            modules[path] = types.ModuleType(path, f"t5forge's stand-in for T5X's {path} (gin)")
            modules[path].__path__ = []  # a package: unknown submodules fail as "No module named"
            parent, _, child = path.rpartition(".")
            if parent:
                setattr(module(parent), child, modules[path])
        return modules[path]

    registered = {
        entry.t5x_path: _register(entry) for entry in NAMES if not entry.registered_by_gin
    }
    for path, obj in registered.items():
        owner_path, _, attribute = path.rpartition(".")
        if owner_path in registered:  # a method: models.EncoderDecoderModel.predict_batch_...
            setattr(registered[owner_path], attribute, obj)
        else:
            setattr(module(owner_path), attribute, obj)
    for path in TASK_MODULES:
        module(path)
    for path, constants in MODULE_CONSTANTS.items():
        for name, value in constants.items():
            setattr(module(path), name, value)
    for alias, path in MODULE_ALIASES.items():
        parent, _, child = alias.rpartition(".")
        modules[alias] = module(path)
        setattr(module(parent), child, modules[alias])
    return modules


MODULES = _build_modules()


def is_t5x_module(name: str) -> bool:
    """Whether `name` is one of the stand-in module names (or below one)."""
    return name.split(".")[0] in FAKE_ROOTS


@contextlib.contextmanager
def t5x_module_names():
    """T5X's module names importable inside the block only; previous entries come back."""
    saved = {name: sys.modules.get(name) for name in MODULES}
    sys.modules.update(MODULES)
    try:
        with stand_in_modules(MODULES):  # task modules gin imports: t5forge.compat's SeqIO, T5
            yield
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
