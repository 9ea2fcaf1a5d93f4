"""What t5forge does with one parameter of a T5X configurable, and the value checks rules use.

After gin parses T5X's files, each binding of a T5X name is handled by its parameter's rule:
moved onto t5forge's configurable (`utils.SaveCheckpointConfig.period`, or elsewhere, as
`trainer.Trainer.num_microbatches` -> `train.num_microbatches`), kept for the T5X name's own
Python (`network.Transformer.config`), dropped because t5forge already behaves that way
(`use_gda = True`), or, when t5forge cannot do what the value asks, dropped with a warning
or refused with an error, each naming the file and line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import gin
import gin.config

# Reasons more than one table of T5X names gives.
FLOAT32 = "t5forge keeps parameters in float32 and computes in T5Config.dtype"
TF_ONLY = "it is a TensorFlow/T5X code path t5forge does not have"


def _always(value) -> bool:
    return True


def _same(value):
    return value


@dataclasses.dataclass(frozen=True)
class Rule:
    """`move_to` ('selector.param', or '.param' for the twin's same-named parameter), `keep`,
    or drop; values that `accepts` rejects are dropped with a warning, or refused."""

    move_to: str | None = None
    keep: bool = False
    accepts: Callable[[Any], bool] = _always
    refuse: bool = False
    reason: str = ""
    convert: Callable[[Any], Any] = _same
    # A field of the whole model (T5Config) written on one of Flaxformer's layers: moved
    # without the binding's scope, and checked against the other bindings of that field.
    model_field: bool = False
    # The model feature the target parameter belongs to (named when t5forge lacks it).
    feature: str = ""
    # A configurable the moved value names, which t5forge must have (else: the feature).
    requires: str = ""
    # Whether an accepted value moves (others are accepted and dropped).
    moves: Callable[[Any], bool] = _always
    # What happens to a binding, in words (the docs' per-parameter tables).
    summary: str = ""

    @property
    def converts(self) -> bool:
        return self.convert is not _same

    def describe(self) -> str:
        """What t5forge does with a binding of this parameter, in words."""
        if self.summary:
            return self.summary
        if self.keep:
            return "used by the name's own Python"
        if self.move_to:
            target = self.move_to
            if target.startswith("."):
                target = f"t5forge's {target[1:] or 'parameter of the same name'}"
            return f"moved to {target}" + (f" ({self.feature})" if self.feature else "")
        if self.accepts is _always:
            return "accepted: t5forge behaves this way for every value"
        return f"where t5forge differs, {otherwise_text(self.refuse, self.reason)}"


def otherwise_text(refuse: bool, reason: str) -> str:
    return f"{'refused' if refuse else 'accepted and ignored with a warning'}: {reason}"


def move(
    to: str = "",
    convert=_same,
    unless: Callable[[Any], bool] | None = None,
    warn: str = "",
    refuse: str = "",
    feature: str = "",
) -> Rule:
    """Moved to t5forge's side: `to` is 'selector.param'; empty means the twin's same name.
    `unless(value)` true drops the value with `warn` or refuses it with `refuse`; `feature`
    names the model feature the target belongs to (see Rule.feature)."""
    accepts = (lambda v: not unless(v)) if unless else _always
    return Rule(
        move_to=to or ".",
        accepts=accepts,
        convert=convert,
        refuse=bool(refuse),
        reason=refuse or warn,
        feature=feature,
    )


def field(
    name: str,
    convert=_same,
    feature: str = "",
    accepts: Callable[[Any], bool] = _always,
    refuse: str = "",
) -> Rule:
    """Moved onto `T5Config.<name>`, whatever the binding's scope: Flaxformer spreads one
    model's hyperparameters over its layers (`dense.MlpBlock.intermediate_dim` -> mlp_dim).
    `feature` names the model feature the field belongs to, for a t5forge without it; values
    `accepts` rejects are refused with `refuse`."""
    summary = f"T5Config.{name}" + (f" ({feature})" if feature else "")
    return Rule(
        move_to=f"T5Config.{name}",
        convert=convert,
        model_field=True,
        feature=feature,
        accepts=accepts,
        refuse=bool(refuse),
        reason=refuse,
        summary=summary + (f"; otherwise {otherwise_text(True, refuse)}" if refuse else ""),
    )


def refused(reason: str) -> Rule:
    """Refused whatever the value: a knob of a path t5forge does not have."""
    return Rule(refuse=True, accepts=lambda v: False, reason=reason)


def keep() -> Rule:
    """Stays bound to the T5X name, whose own Python uses it."""
    return Rule(keep=True)


def honoured(*values, warn: str = "", refuse: str = "") -> Rule:
    """t5forge already behaves as these values ask; anything else is dropped with `warn`
    or refused with `refuse`."""
    shown = " or ".join(repr(v) for v in values)
    return Rule(
        accepts=lambda v: any(_equal(v, ok) for ok in values),
        refuse=bool(refuse),
        reason=refuse or warn,
        summary=f"honoured when {shown}; otherwise {otherwise_text(bool(refuse), refuse or warn)}",
    )


def equivalent() -> Rule:
    """A T5X knob whose every value t5forge matches (e.g. `use_gda`, `use_memory_cache`);
    docs/t5x-migration.md ("What differs") lists them."""
    return Rule()


def reference(*t5x_selectors: str, refuse: str) -> Rule:
    """Accepted when the value is `@<selector>` of one of them (e.g. `trainer_cls =
    @trainer.Trainer`); a selector of None accepts None."""
    shown = " or ".join("None" if s is None else f"@{_short(s)}" for s in t5x_selectors)
    return Rule(
        accepts=names_one_of(*t5x_selectors),
        refuse=True,
        reason=refuse,
        summary=f"accepted when {shown}; otherwise {otherwise_text(True, refuse)}",
    )


def names_one_of(*selectors: str | None) -> Callable[[Any], bool]:
    """Whether a value is `@<selector>` of one of them (a selector of None: the value None)."""
    return lambda v: any(v is None if s is None else refers_to(v, s) for s in selectors)


def _short(selector: str) -> str:
    """`t5x.trainer.Trainer` -> `trainer.Trainer` (module and name, as gin files write it)."""
    return ".".join(selector.split(".")[-2:])


def _equal(value, expected) -> bool:
    if isinstance(value, list | tuple) and isinstance(expected, list | tuple):
        return list(value) == list(expected)
    return type(value) is type(expected) and value == expected or value is expected


def refers_to(value, complete_selector: str) -> bool:
    """Whether `value` is a gin reference (`@name` or `@name()`) to that configurable."""
    return (
        isinstance(value, gin.config.ConfigurableReference)
        and value.configurable.selector == complete_selector
    )


def macro_name(value) -> str | None:
    """`NAME` for a `%NAME` reference, else None."""
    if (
        isinstance(value, gin.config.ConfigurableReference)
        and value.configurable.wrapped is gin.config.macro
    ):
        return value.scoped_selector.rsplit("/", 1)[0]
    return None


def _constant(value):
    """The value of a gin constant reference (`%moe_enums.LayerLayout.MIXED`), else `value`."""
    if (
        isinstance(value, gin.config.ConfigurableReference)
        and value.configurable.wrapped is gin.config._retrieve_constant
    ):
        return gin.config._CONSTANTS[value.scoped_selector.rsplit("/", 1)[0]]
    return value


def resolve_macros(value):
    """The value with every `%NAME` replaced by what NAME is bound to, and gin constants by
    their values (references stay)."""
    value = _constant(value)
    name = macro_name(value)
    if name is not None:
        try:
            return resolve_macros(gin.query_parameter(f"%{name}"))
        except ValueError:
            return value
    if isinstance(value, list | tuple):
        return type(value)(resolve_macros(v) for v in value)
    if isinstance(value, Mapping):
        return {k: resolve_macros(v) for k, v in value.items()}
    return value
