"""After gin parsed T5X files: their bindings onto t5forge's configurables, the rest reported.

Every binding of a T5X name goes through its parameter's rule (names.py): moved to t5forge's
configurable unless the command line already bound that one (so `--gin.` overrides win),
kept, dropped silently when t5forge behaves that way anyway, dropped with a one-line warning,
or refused. Paths on object storage (`gs://...`) pass as they are: t5forge reads and writes
them through t5forge.storage. Every line names
the file and line (or flag) of the binding. Then gin forgets the T5X imports, so config.gin
is written with t5forge's names.

Flaxformer's names (flaxformer_names.py) go the same way; their `field` rules gather one
T5Config from every layer's bindings, refusing two that disagree. A binding whose target this
t5forge lacks (a model feature: LongT5's attention, MoE layers) refuses the parse in one line
naming the feature, as MissingModelFeature, which carries the T5Config fields the files set.
"""

from __future__ import annotations

import inspect
import sys

import gin

from t5forge.errors import ConfigError
from t5forge.gin_config import gin_internals
from t5forge.gin_config.t5x_compat.locations import Locator, Written
from t5forge.gin_config.t5x_compat.modules import is_t5x_module
from t5forge.gin_config.t5x_compat.name_entry import T5XName
from t5forge.gin_config.t5x_compat.names import NAMES
from t5forge.gin_config.t5x_compat.rules import Rule, macro_name, resolve_macros


class MissingModelFeature(ConfigError):
    """A file binds a model feature this t5forge does not build (LongT5's encoder attention,
    mixture-of-experts layers); `fields` holds every T5Config field the files' bindings set,
    the missing ones included, as they would be built."""

    def __init__(self, message: str, fields: dict):
        super().__init__(message)
        self.fields = fields


class _Report:
    def __init__(self, locator: Locator):
        self.locator = locator
        self.warnings: list[str] = []
        self.errors: list[str] = []
        # T5Config fields moved from Flaxformer's layers: field -> (value, the line that set it)
        self.fields: dict[str, tuple[object, str]] = {}
        self.missing: list[str] = []

    def line(
        self, written: Written | None, fallback: str, message: str, value=None, raw=None
    ) -> str:
        """'file:line: binding as written (= value it reached): message'."""
        if written is None:
            return f"{fallback}: {message}"
        reached = f" (= {value!r})" if macro_name(raw) else ""
        return f"{written.where}: {written.text()}{reached}: {message}"


def _key(scope: str, selector: str, param: str) -> str:
    return f"{scope}/{selector}.{param}" if scope else f"{selector}.{param}"


def _where(entry: T5XName, report: _Report, scope: str, param: str, raw, value) -> str:
    """'file:line: binding as written' of one binding of `entry`."""
    written = report.locator.binding(scope, (entry.t5x_path, entry.gin_selector), param)
    fallback = _key(scope, entry.gin_selector, param) + f" = {value!r}"
    return report.line(written, fallback, "", value, raw).removesuffix(": ")


def _accepts_parameter(selector: str | None, param: str) -> bool:
    if selector is None:
        return False
    signature = inspect.signature(gin_internals.registered_object(selector))
    return param in signature.parameters or any(
        p.kind is p.VAR_KEYWORD for p in signature.parameters.values()
    )


def _registered(partial: str) -> str | None:
    """The complete selector of a t5forge configurable, or None where this t5forge has none
    (a feature another branch adds: `partitioning.MoePjitPartitioner`)."""
    try:
        complete = gin_internals.complete_selector(partial)
    except (AttributeError, KeyError, ValueError):
        return None
    if is_t5x_module(complete) and not is_t5x_module(partial):
        return None  # t5forge's name found only T5X's stand-in (`trainer.MoeTrainer`)
    return complete


def _target(entry: T5XName, rule: Rule, param: str) -> tuple[str | None, str, str]:
    """(complete selector or None, parameter, name for messages) a rule moves a binding to."""
    target, _, target_param = rule.move_to.rpartition(".")
    partial = target or entry.twin
    complete = _registered(partial)
    if complete is not None and rule.requires and _registered(rule.requires) is None:
        complete = None
    name = gin_internals.short_name(complete) if complete else partial
    return complete, target_param or param, name


def _move(entry: T5XName, rule: Rule, scope: str, param: str, raw, value, report) -> None:
    target, target_param, target_name = _target(entry, rule, param)
    written = _where(entry, report, scope, param, raw, value)
    present = _accepts_parameter(target, target_param)
    # A model field converts on its own (its value is kept for MissingModelFeature.fields);
    # other conversions may name the target, so only a present one converts.
    converts = rule.converts and (present or rule.model_field)
    converted = rule.convert(value) if converts else value
    if rule.model_field:
        scope = ""  # one field of the whole model, whichever layer bound it
        earlier = report.fields.get(target_param)
        if earlier is not None and earlier[0] != converted:
            report.errors.append(
                f"{written}: sets T5Config.{target_param} = {converted!r}, but {earlier[1]} "
                f"set it to {earlier[0]!r}; t5forge's network has one {target_param}"
            )
        report.fields.setdefault(target_param, (converted, written))
    if not present:
        feature = rule.feature or "this setting"
        report.missing.append(
            f"{written}: needs {feature} ({rule.requires or f'{target_name}.{target_param}'}), "
            "which this t5forge does not build"
        )
        return
    if target_param in gin_internals.bindings_of(target).get(scope, {}) and not (
        report.locator.flag_given_later(
            scope, (entry.t5x_path, entry.gin_selector), param, target, target_param
        )
    ):
        return  # bound on t5forge's name (the command line): that binding wins
    moved = raw if converted is value else converted  # keeps %MACRO for config.gin
    gin.bind_parameter(_key(scope, target, target_param), moved)


def _take_over_shadowing_bindings(entry: T5XName) -> None:
    """Bindings made under T5X's spelling to t5forge's namesake (command line, files without
    imports) belong to the T5X name when T5X files use it; later ones win, as in gin."""
    if not entry.shadowed_by or not gin_internals.bindings_of(entry.gin_selector):
        return
    shadow = gin_internals.complete_selector(entry.shadowed_by)
    for scope, params in gin_internals.bindings_of(shadow).items():
        for param, value in list(params.items()):
            if param not in entry.parameters():
                continue  # t5forge's own parameter (DatasetConfig's ...): stays t5forge's
            gin.bind_parameter(_key(scope, entry.gin_selector, param), value)
            gin_internals.unbind(scope, shadow, param)


def _apply(entry: T5XName, report: _Report) -> None:
    names = (entry.t5x_path, entry.gin_selector)
    _take_over_shadowing_bindings(entry)
    for scope, params in gin_internals.bindings_of(entry.gin_selector).items():
        for param, raw in params.items():
            rule = entry.rule(scope, param)
            if rule.keep:
                continue
            value = resolve_macros(raw)
            gin_internals.unbind(scope, entry.gin_selector, param)
            if rule.accepts(value):
                if rule.move_to and rule.moves(value):
                    _move(entry, rule, scope, param, raw, value, report)
                continue
            written = report.locator.binding(scope, names, param)
            fallback = _key(scope, entry.gin_selector, param) + f" = {value!r}"
            if rule.refuse:
                report.errors.append(
                    report.line(written, fallback, f"not supported: {rule.reason}", value, raw)
                )
            else:
                report.warnings.append(
                    report.line(
                        written, fallback, f"accepted and ignored: {rule.reason}", value, raw
                    )
                )


def _precompile_compiles_with_the_models_optimizer() -> None:
    """T5X's precompile compiles the step of the model's optimizer_def, which moved to
    train.optimizer: precompile takes it from there (unless bound itself)."""
    precompile = gin_internals.complete_selector("precompile")
    bound = gin_internals.bindings_of(precompile)
    if not bound:
        return
    train = gin_internals.complete_selector("train")
    for scope, params in gin_internals.bindings_of(train).items():
        if "optimizer" in params and "optimizer" not in bound.get(scope, {}):
            gin.bind_parameter(_key(scope, precompile, "optimizer"), params["optimizer"])


def translate(files_read: list[str], flags: list[str]) -> None:
    """Rewrites the parsed T5X bindings (see module doc); raises ConfigError on a refusal."""
    if not any(gin_internals.bindings_of(entry.gin_selector) for entry in NAMES) and not any(
        is_t5x_module(s.module) for s in gin_internals.imports()
    ):
        return
    report = _Report(Locator(files_read, flags))
    for entry in NAMES:
        if not entry.same_object:
            _apply(entry, report)
    _precompile_compiles_with_the_models_optimizer()
    gin_internals.spell_out_references()
    gin_internals.forget_imports(is_t5x_module)
    for line in dict.fromkeys(report.warnings):
        print(f"warning: {line}", file=sys.stderr)
    if report.errors:
        for line in report.errors[1:]:
            print(f"error: {line}", file=sys.stderr)
        raise ConfigError(report.errors[0])
    if report.missing:  # one line: the rest name the same missing feature
        fields = {name: value for name, (value, _) in report.fields.items()}
        raise MissingModelFeature(report.missing[0], fields)


def missing_parameters(feature: str) -> list[str]:
    """The parameters (`T5Config.num_experts`) and configurables that the rules of `feature`
    move bindings onto and this t5forge lacks: empty once the feature is built."""
    missing = []
    for entry in NAMES:
        rules = [entry.rules, *entry.scoped_rules.values()]
        for param, rule in ((p, r) for scoped in rules for p, r in scoped.items()):
            if rule.feature != feature or not rule.move_to:
                continue
            target, target_param, name = _target(entry, rule, param)
            if not _accepts_parameter(target, target_param):
                missing.append(rule.requires or f"{name}.{target_param}")
    return sorted(set(missing))
