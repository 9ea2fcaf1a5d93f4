"""Whether a gin value fits the parameter it is bound to: the library's own annotations, plus
the few limits an annotation cannot say (a batch size of at least 1, ...), in one table.

Only the forms gin literals take are judged (numbers, strings, booleans, None, lists, tuples,
dicts); a value holding an `@reference` is whatever that configurable returns, and is left
to it.
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from collections.abc import Callable, Mapping

import gin.config

from t5forge.models.configs import T5Config
from t5forge.run import dataset_and_checkpoint_configs as configs
from t5forge.run.evaluate import evaluate
from t5forge.run.infer import infer
from t5forge.run.train import train
from t5forge.training import partitioning


def _positive_lengths(value) -> bool:
    return value is None or all(length >= 1 for length in value.values())


_AT_LEAST_1 = (lambda v: v is None or v >= 1, "an int >= 1")
_AT_LEAST_0 = (lambda v: v is None or v >= 0, "an int >= 0")
_LENGTHS = (
    _positive_lengths,
    "a dict of feature name -> length >= 1, e.g. {'inputs': 512, 'targets': 114}",
)

# (configurable, parameter) -> (what its values must also satisfy, the whole requirement).
LIMITS: dict[tuple[object, str], tuple[Callable[[object], bool], str]] = {
    (configs.DatasetConfig, "batch_size"): _AT_LEAST_1,
    (configs.DatasetConfig, "task_feature_lengths"): _LENGTHS,
    (configs.SaveCheckpointConfig, "period"): _AT_LEAST_1,
    (configs.SaveCheckpointConfig, "keep"): _AT_LEAST_1,
    (train, "total_steps"): _AT_LEAST_0,
    (train, "eval_period"): _AT_LEAST_0,
    (train, "eval_steps"): _AT_LEAST_1,
    (train, "stats_period"): _AT_LEAST_1,
    (train, "num_microbatches"): _AT_LEAST_1,
    (train, "max_skipped_nonfinite_steps"): _AT_LEAST_0,
    (infer, "checkpoint_period"): _AT_LEAST_1,
    (evaluate, "max_decode_length"): _AT_LEAST_1,
    (infer, "max_decode_length"): _AT_LEAST_1,
    (partitioning.PjitPartitioner, "num_partitions"): _AT_LEAST_1,
    **{
        (T5Config, name): _AT_LEAST_1
        for name in ("vocab_size", "emb_dim", "num_heads", "head_dim", "mlp_dim")
    },
    **{(T5Config, name): _AT_LEAST_0 for name in ("num_encoder_layers", "num_decoder_layers")},
}


def parameter_types(fn_or_cls) -> dict[str, object]:
    """{parameter: annotation} of a configurable; {} where its annotations cannot be read."""
    is_plain_class = inspect.isclass(fn_or_cls) and not hasattr(fn_or_cls, "__dataclass_fields__")
    try:
        hints = typing.get_type_hints(fn_or_cls.__init__ if is_plain_class else fn_or_cls)
    except (NameError, TypeError, AttributeError):
        return {}
    hints.pop("return", None)
    return hints


def holds_reference(value) -> bool:
    if isinstance(value, gin.config.ConfigurableReference):
        return True
    if isinstance(value, list | tuple):
        return any(holds_reference(v) for v in value)
    if isinstance(value, Mapping):
        return any(holds_reference(v) for v in value.values())
    return False


def _fits(value, annotation) -> bool:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is typing.Any or isinstance(value, gin.config.ConfigurableReference):
        return True
    if annotation is None or annotation is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if origin is typing.Literal:
        return value in args
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if origin in (dict, collections.abc.Mapping):
        return isinstance(value, Mapping) and (
            not args or all(_fits(k, args[0]) and _fits(v, args[1]) for k, v in value.items())
        )
    if origin is tuple and args and args[-1] is not Ellipsis:
        return (
            isinstance(value, list | tuple)
            and len(value) == len(args)
            and all(_fits(v, a) for v, a in zip(value, args, strict=True))
        )
    if origin in (tuple, list, collections.abc.Sequence):
        return isinstance(value, list | tuple) and all(_fits(v, args[0]) for v in value if args)
    if origin is not None or not isinstance(annotation, type):
        return True  # Callable[...], type[...] and the like: not a literal's business
    return isinstance(value, annotation)


_NAMES = {
    int: "an int",
    float: "a number",
    bool: "True or False",
    str: "a string",
    type(None): "None",
}


def describe(annotation) -> str:
    """'an int', 'a dict of str -> int or None', ... for the error line."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(arg) for arg in args)
    if origin in (dict, collections.abc.Mapping) and args:
        return f"a dict of {describe(args[0]).split(' ', 1)[-1]} -> {describe(args[1]).split(' ', 1)[-1]}"
    if origin in (tuple, list, collections.abc.Sequence):
        return "a list or tuple"
    if annotation in _NAMES:
        return _NAMES[annotation]
    return f"a {getattr(annotation, '__name__', annotation)} (an @reference)"


def requirement(fn_or_cls, param: str, value) -> str | None:
    """What `param` of the configurable takes, when `value` does not fit it; else None."""
    annotation = parameter_types(fn_or_cls).get(param)
    limit = LIMITS.get((fn_or_cls, param))
    if holds_reference(value):
        return None
    if annotation is not None and not _fits(value, annotation):
        return limit[1] if limit else describe(annotation)
    if limit and not limit[0](value):
        return limit[1]
    return None
