"""A run's gin bindings checked once parsed, before anything is built or written.

Starting from the command's configurable (`train`, `evaluate`, `infer`), every `@reference`
and `%MACRO` its bindings hold is followed, in the scope gin will call it in, as gin looks
bindings up (a call in scope `train` reads `train/...` and unscoped bindings). Each binding
reached is checked against the parameter it fills (binding_types); a wrong one is an error
naming the binding and the file:line or `--gin.` flag it was written in. A binding reached by
nothing is reported as unused (a misspelt macro, another command's binding): a warning, or
an error with --gin_strict. Not reported, as T5X reports none of these either: bindings of
a configurable the config wires in somewhere but another binding switched off
(`train.infer_eval_dataset_cfg = None` leaves `infer_eval/utils.DatasetConfig.*` unread); the
stock run files' (`configs/runs/*.gin`, t5forge's and T5X's) defaults for whatever model file
comes with them (DROPOUT_RATE where the model fixes its dropout); and bindings the T5X
translation made (a T5X model file's optimizer, moved onto `train.optimizer`, in `eval`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import gin.config

from t5forge.errors import ConfigError
from t5forge.gin_config import binding_types, gin_internals
from t5forge.gin_config.t5x_compat.locations import Locator, Written, nested_leaves
from t5forge.gin_config.t5x_compat.names import NAMES
from t5forge.gin_config.t5x_compat.rules import macro_name, resolve_macros

MACRO = "gin.macro"
Key = tuple[str, str, str]  # (scope, complete selector, parameter)


def _called_from_python() -> dict[str, list[str]]:
    """Configurables that call another one in their Python, where no binding shows it:
    the model builds the bound T5Config, and so do T5X's and Flaxformer's networks
    (`network.Transformer`, `t5_architecture.EncoderDecoder`); each T5X name that forwards
    to its t5forge twin calls that twin."""
    t5config = gin_internals.complete_selector("T5Config")
    calls = {gin_internals.complete_selector("models.Model"): [t5config]}
    for entry in NAMES:
        if entry.build is None and entry.twin and not entry.same_object:
            try:
                calls[entry.gin_selector] = [gin_internals.complete_selector(entry.twin)]
            except (AttributeError, KeyError, ValueError):
                continue  # a twin of a feature this t5forge lacks (refused when bound)
        elif entry.builds_config:
            calls[entry.gin_selector] = [t5config]
    return calls


def _references(value) -> Iterator[gin.config.ConfigurableReference]:
    for leaf in nested_leaves(value):
        if isinstance(leaf, gin.config.ConfigurableReference):
            yield leaf


class _Walk:
    """The bindings gin will read when the configurables reached from the roots are called."""

    def __init__(self, bindings: dict[tuple[str, str], dict]):
        self.bindings = bindings
        self.reads: dict[Key, None] = {}
        self._calls: set[tuple[tuple[str, ...], str]] = set()
        self._python_calls = _called_from_python()

    def call(self, selector: str, scope: tuple[str, ...]) -> None:
        if (scope, selector) in self._calls:
            return
        self._calls.add((scope, selector))
        read: dict[str, str] = {}
        for i in range(len(scope) + 1):  # gin: outer scopes first, inner ones override
            prefix = "/".join(scope[:i])
            read.update(dict.fromkeys(self.bindings.get((prefix, selector), {}), prefix))
        for param, prefix in read.items():
            self.reads[(prefix, selector, param)] = None
            for reference in _references(self.bindings[(prefix, selector)][param]):
                self.call(reference.configurable.selector, tuple(reference.scopes) or scope)
        for callee in self._python_calls.get(selector, ()):
            self.call(callee, scope)

    def call_written(self, text: str) -> None:
        """Follows a reference as a file wrote it (`@scope/name()`, `%NAME`)."""
        match = re.fullmatch(r"([@%])([\w./]+?)(\(\))?", text)
        if not match:
            return
        sigil, scoped, _ = match.groups()
        if sigil == "%":
            self.call(MACRO, tuple(scoped.split("/")))
            return
        *scopes, partial = scoped.split("/")
        try:
            self.call(gin_internals.complete_selector(partial), tuple(scopes))
        except (KeyError, ValueError, AttributeError):
            return  # a name only its T5X file's imports resolve; its bindings moved anyway


def _written_references(value) -> Iterator[str]:
    """The `@name`/`%NAME` texts in a value as the Locator parsed it."""
    for leaf in nested_leaves(value):
        if not isinstance(leaf, str | int | float | bool | type(None)):
            yield repr(leaf)


def _t5x_names(selector: str) -> list[str]:
    """T5X's paths whose bindings moved onto this selector (for finding where they were)."""
    names = [selector]
    for entry in NAMES:
        try:
            if entry.twin and gin_internals.complete_selector(entry.twin) == selector:
                names.append(entry.t5x_path)
        except (KeyError, ValueError, AttributeError):
            continue
    return names


class _Places:
    """Where each binding was written: `file:LINE: text` or the flag; the key when unknown."""

    def __init__(self, locator: Locator):
        self.locator = locator

    def written(self, key: Key) -> Written | None:
        scope, selector, param = key
        if selector == MACRO:
            macro_scope, _, name = scope.rpartition("/")
            return self.locator.binding(macro_scope, [name], "")
        return self.locator.binding(scope, _t5x_names(selector), param)

    def __call__(self, key: Key) -> str:
        written = self.written(key)
        if written is None:
            return _name(key)
        if written.where.startswith("--gin."):
            return written.where
        return f"{written.where}: {written.text()}"


def _name(key: Key) -> str:
    scope, selector, param = key
    if selector == MACRO:
        return scope
    name = gin_internals.short_name(selector)
    return f"{scope}/{name}.{param}" if scope else f"{name}.{param}"


def _literal_source(key: Key, raw, bindings) -> Key:
    """The binding that wrote the literal: the last macro of a `%A` -> `%B` -> value chain."""
    name = macro_name(raw)
    while name is not None and (name, MACRO) in bindings:
        key = (name, MACRO, "value")
        name = macro_name(bindings[(name, MACRO)]["value"])
    return key


def _type_errors(walk: _Walk, places: _Places) -> list[str]:
    errors = {}
    for key in walk.reads:
        scope, selector, param = key
        if selector == MACRO:
            continue  # checked where a binding uses it
        raw = walk.bindings[(scope, selector)][param]
        value = resolve_macros(raw)
        required = binding_types.requirement(
            gin_internals.registered_object(selector), param, value
        )
        if required is None:
            continue
        source = _literal_source(key, raw, walk.bindings)
        via = f" (it fills {_name(key)})" if source != key else ""
        errors.setdefault(places(source), f"{_name(source)} must be {required}{via}, not {value!r}")
    return [f"{where}: {message}" for where, message in errors.items()]


def _user_written(written: Written | None) -> bool:
    """Whether an unread binding is the user's to fix (see the module doc for the others)."""
    if written is None:
        return False
    if written.where.startswith("--gin."):
        return True
    folder = Path(written.where.rsplit(":", 1)[0]).parent
    return not (folder.name == "runs" and folder.parent.name == "configs")


def _unused(walk: _Walk, wired: _Walk, places: _Places, command: str) -> list[str]:
    lines = []
    for (scope, selector), params in walk.bindings.items():
        for param in params:
            key = (scope, selector, param)
            if (
                key not in walk.reads
                and key not in wired.reads
                and _user_written(places.written(key))
            ):
                lines.append(
                    f"{places(key)}: not used by `t5forge {command}` (no configurable "
                    "it calls reads it); remove it or fix its name"
                )
    return lines


def check(root: str, command: str, flags: list[str], strict: bool) -> None:
    """Checks the parsed config of `t5forge <command>`, whose configurable is `root`
    ('train', 'evaluate', 'infer'); `flags` are the `--gin.` bindings as parsed."""
    bindings = gin_internals.all_bindings()
    locator = Locator(gin_internals.files_read_by_last_parse(), flags)
    places = _Places(locator)
    walk = _Walk(bindings)
    walk.call(gin_internals.complete_selector(root), ())
    errors = _type_errors(walk, places)
    wired = _Walk(bindings)
    for statement in locator.statements:
        for text in _written_references(statement.value):
            wired.call_written(text)
    unused = _unused(walk, wired, places, command)
    if strict:
        errors += [f"{line} (--gin_strict)" for line in unused]
    else:
        for line in unused:
            print(f"warning: {line}", file=sys.stderr)
    if errors:
        for line in errors[1:]:
            print(f"error: {line}", file=sys.stderr)
        raise ConfigError(errors[0])
