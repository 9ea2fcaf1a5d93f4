"""The preprocessor framework: how a step runs inside a task's grain pipeline.

Users write plain Python: a per-example function `fn(example) -> example` (or
`fn(example, rng)` when it needs randomness; return None to drop the example). A task wraps
each one so that grain applies it lazily, seeds `rng` from (task seed, step, example
position) so a resumed pipeline reproduces every draw, and counts dropped examples instead
of losing them silently. Steps that change the number of examples (span corruption packs
several documents into fixed-length segments; rank classification emits one example per
choice) are dataset preprocessors: `fn(ds, ...) -> ds` over grain datasets. Either kind may
ask for `sequence_length`, `output_features` (and dataset ones for `context`) by naming
them as keyword parameters. A per-example step with a high per-call cost can be written
over lists instead (`batched_example_preprocessor`, as `tokenize` is): a regroup reads its
whole group in one batched read, so such a step runs once per group.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import importlib
import inspect
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grain

from t5forge.data.grain_ops.regroup import BatchMapDataset
from t5forge.errors import DataError
from t5forge.user_code import described, raised_in_user_code

Example = dict[str, Any]
_CONTEXT_ARGS = ("sequence_length", "output_features")


@dataclasses.dataclass
class PipelineContext:
    """What a preprocessor may need from the task building the pipeline."""

    task_name: str
    output_features: Mapping[str, Any]
    sequence_length: Mapping[str, int] | None
    seed: int
    dropped: collections.Counter


def _accepted(fn: Callable, names: Sequence[str]) -> tuple[str, ...]:
    params = inspect.signature(fn).parameters
    return tuple(n for n in names if n in params)


@contextlib.contextmanager
def _errors_named(task_name: str, step_name: str):
    """Re-raises a step's DataError, or an exception the user's own step raised, as one
    DataError with the task and step named in front (and where the user's code raised it)."""
    try:
        yield
    except DataError as e:
        raise DataError(f"task {task_name!r}, preprocessor {step_name}: {e}") from None
    except Exception as e:
        at = raised_in_user_code(e)
        if at is None:
            raise
        raise DataError(
            f"task {task_name!r}, preprocessor {step_name} raised {described(e)} ({at})"
        ) from None


class _ExampleCall:
    """Picklable per-example call: binds kwargs, counts drops, names the task in errors."""

    def __init__(self, preprocessor, kwargs, task_name, dropped, with_rng):
        self.preprocessor, self.kwargs, self.name = preprocessor, kwargs, preprocessor.name
        self.task_name, self.dropped, self.with_rng = task_name, dropped, with_rng

    def _run(self, example, *rng):
        with _errors_named(self.task_name, self.name):
            result = self.preprocessor.fn(example, *rng, **self.kwargs)
        if result is None:
            if not self.dropped[self.name]:
                logging.getLogger(__name__).warning(
                    "task %r: preprocessor %s dropped an example (counted in "
                    "task.dropped_example_counts)",
                    self.task_name,
                    self.name,
                )
            self.dropped[self.name] += 1
        return result

    def __call__(self, example, rng=None):
        return self._run(example, rng) if self.with_rng else self._run(example)


def _not_none(example) -> bool:
    return example is not None


class Preprocessor:
    """A named step with bound keyword arguments; `bind(**kw)` returns a configured copy."""

    def __init__(self, fn: Callable, kwargs: Mapping[str, Any] | None = None):
        self.fn = fn
        self.kwargs = dict(kwargs or {})
        functools.update_wrapper(self, fn)

    @property
    def name(self) -> str:
        return getattr(self.fn, "__name__", type(self.fn).__name__)

    def bind(self, **kwargs) -> Preprocessor:
        return type(self)(self.fn, {**self.kwargs, **kwargs})

    def __call__(self, *args, **kwargs):
        """Runs the plain function (useful on one example in tests and notebooks)."""
        return self.fn(*args, **{**self.kwargs, **kwargs})

    def _context_kwargs(self, ctx: PipelineContext, names=_CONTEXT_ARGS) -> dict[str, Any]:
        values = {
            "sequence_length": ctx.sequence_length,
            "output_features": ctx.output_features,
            "context": ctx,
        }
        return {n: values[n] for n in _accepted(self.fn, names) if n not in self.kwargs}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"{self.name}({args})"

    def __reduce__(self):
        # A decorated module-level function is only reachable through its Preprocessor, so
        # pickle (for grain worker processes) by that name and re-bind the arguments.
        module = sys.modules.get(getattr(self.fn, "__module__", ""))
        registered = getattr(module, getattr(self.fn, "__qualname__", ""), None)
        if isinstance(registered, Preprocessor) and registered.fn is self.fn:
            return (_bind_registered, (self.fn.__module__, self.fn.__qualname__, self.kwargs))
        return (type(self), (self.fn, self.kwargs))


def _bind_registered(module_name: str, name: str, kwargs) -> Preprocessor:
    return getattr(importlib.import_module(module_name), name).bind(**kwargs)


class ExamplePreprocessor(Preprocessor):
    """A per-example step; functions with an `rng` parameter get a per-example Generator."""

    def apply(self, ds, ctx: PipelineContext, seed: int):
        with_rng = "rng" in inspect.signature(self.fn).parameters
        call = _ExampleCall(
            self, {**self.kwargs, **self._context_kwargs(ctx)}, ctx.task_name, ctx.dropped, with_rng
        )
        ds = ds.random_map(call, seed=seed) if with_rng else ds.map(call)
        if isinstance(ds, grain.IterDataset):
            ds = ds.filter(_not_none)
        return ds


class DatasetPreprocessor(Preprocessor):
    """A step over a whole grain dataset (MapDataset or IterDataset in, either out)."""

    def apply(self, ds, ctx: PipelineContext, seed: int):
        kwargs = {**self.kwargs, **self._context_kwargs(ctx, _CONTEXT_ARGS + ("context",))}
        if "seed" in inspect.signature(self.fn).parameters:
            kwargs.setdefault("seed", seed)
        with _errors_named(ctx.task_name, self.name):
            return self.fn(ds, **kwargs)


class _BatchCall:
    """Picklable list call: binds kwargs, names the task in errors; `one` for single examples."""

    def __init__(self, preprocessor, kwargs, task_name):
        self.preprocessor, self.kwargs, self.task_name = preprocessor, kwargs, task_name

    def __call__(self, examples: list) -> list:
        with _errors_named(self.task_name, self.preprocessor.name):
            return self.preprocessor.fn(examples, **self.kwargs)

    def one(self, example):
        return self([example])[0]


class BatchedExamplePreprocessor(Preprocessor):
    """A per-example step written over lists: `fn(examples, **kw)` -> one output per input.

    For work with a high per-call cost (tokenizing): reads of many examples at once get one
    call. Called directly, a list of examples gives a list and one example gives its result.
    """

    def __call__(self, examples, **kwargs):
        kwargs = {**self.kwargs, **kwargs}
        if isinstance(examples, list):
            return self.fn(examples, **kwargs)
        return self.fn([examples], **kwargs)[0]

    def apply(self, ds, ctx: PipelineContext, seed: int):
        call = _BatchCall(self, {**self.kwargs, **self._context_kwargs(ctx)}, ctx.task_name)
        if isinstance(ds, grain.MapDataset):
            return BatchMapDataset(ds, call, self.name)
        return ds.map(call.one)


def example_preprocessor(fn: Callable) -> ExamplePreprocessor:
    """Decorator: makes `fn(example[, rng], **kw) -> example | None` a pipeline step."""
    return ExamplePreprocessor(fn)


def batched_example_preprocessor(fn: Callable) -> BatchedExamplePreprocessor:
    """Decorator: makes `fn(examples, **kw) -> examples` (same length) a per-example step."""
    return BatchedExamplePreprocessor(fn)


def dataset_preprocessor(fn: Callable) -> DatasetPreprocessor:
    """Decorator: makes `fn(ds, **kw) -> ds` over grain datasets a pipeline step."""
    return DatasetPreprocessor(fn)


class CacheDatasetPlaceholder:
    """Marks where `t5forge cache-tasks` stops: steps before it are cached, after it re-run."""

    def __repr__(self):
        return "CacheDatasetPlaceholder()"


def as_preprocessor(item) -> Preprocessor | CacheDatasetPlaceholder:
    """Accepts a Preprocessor, a functools.partial of one (seqio style), or a plain function."""
    if isinstance(item, (Preprocessor, CacheDatasetPlaceholder)):
        return item
    if isinstance(item, type) and issubclass(item, CacheDatasetPlaceholder):
        return item()
    if isinstance(item, functools.partial) and isinstance(item.func, Preprocessor):
        if item.args:
            raise DataError(f"bind {item.func.name} with keyword arguments only, not {item.args}")
        return item.func.bind(**item.keywords)
    if callable(item):
        return ExamplePreprocessor(item)
    raise DataError(f"{item!r} is not a preprocessor; pass a function or a Preprocessor")
