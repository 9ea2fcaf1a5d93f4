"""Preprocessors: the steps that turn raw source rows into model features, as grain transforms.

Users write plain Python: a per-example function `fn(example) -> example` (or
`fn(example, rng)` when it needs randomness; return None to drop the example). A task wraps
each one so that grain applies it lazily, seeds `rng` from (task seed, step, example
position) so a resumed pipeline reproduces every draw, and counts dropped examples instead
of losing them silently. Steps that change the number of examples (span corruption packs
several documents into fixed-length segments; rank classification emits one example per
choice) are dataset preprocessors: `fn(ds, ...) -> ds` over grain datasets. Either kind may
ask for `sequence_length`, `output_features` (and dataset ones for `context`) by naming
them as keyword parameters. Span corruption lives in `t5forge.data.span_corruption`.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import importlib
import inspect
import itertools
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grain
import numpy as np

from t5forge.errors import DataError

Example = dict[str, Any]
# Threads that run lazy per-example steps ahead of the consumer. Small on purpose: grain
# scans the whole buffer on every element, and the work is mostly GIL-bound Python.
READ_OPTIONS = grain.ReadOptions(num_threads=2, prefetch_buffer_size=16)
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


class _ExampleCall:
    """Picklable per-example call: binds kwargs, counts drops, names the task in errors."""

    def __init__(self, preprocessor, kwargs, task_name, dropped, with_rng):
        self.preprocessor, self.kwargs, self.name = preprocessor, kwargs, preprocessor.name
        self.task_name, self.dropped, self.with_rng = task_name, dropped, with_rng

    def _run(self, example, *rng):
        try:
            result = self.preprocessor.fn(example, *rng, **self.kwargs)
        except DataError as e:
            raise DataError(f"task {self.task_name!r}, preprocessor {self.name}: {e}") from None
        if result is None:
            if not self.dropped[self.name]:
                logging.getLogger(__name__).warning(
                    "task %r: preprocessor %s dropped an example (counted in "
                    "task.dropped_example_counts)", self.task_name, self.name)
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
        values = {"sequence_length": ctx.sequence_length,
                  "output_features": ctx.output_features, "context": ctx}
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
        call = _ExampleCall(self, {**self.kwargs, **self._context_kwargs(ctx)},
                            ctx.task_name, ctx.dropped, with_rng)
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
        return self.fn(ds, **kwargs)


def example_preprocessor(fn: Callable) -> ExamplePreprocessor:
    """Decorator: makes `fn(example[, rng], **kw) -> example | None` a pipeline step."""
    return ExamplePreprocessor(fn)


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


# ---------------------------------------------------------------- regrouping (n -> m examples)


class _RegroupIterator(grain.DatasetIterator):
    """Reads `group_size` examples, emits `fn(group, rng)`; resumes exactly mid-group.

    The state is the parent's state at the start of the current group plus how many outputs
    of that group were already returned, so a restore re-reads and regenerates the group
    (with the same RNG) and skips what was emitted.
    """

    def __init__(self, parent, fn, group_size, seed):
        super().__init__(parent)
        self._fn, self._group_size, self._seed = fn, group_size, seed
        self._group_index = 0
        self._group_start = copy.deepcopy(parent.get_state())
        self._outputs: list | None = None
        self._emitted = 0

    def __next__(self):
        while True:
            if self._outputs is None:
                self._group_start = copy.deepcopy(self._parent.get_state())
                group = list(itertools.islice(self._parent, self._group_size))
                if not group:
                    raise StopIteration
                rng = np.random.default_rng([self._seed, self._group_index])
                self._outputs = list(self._fn(group, rng))
            if self._emitted < len(self._outputs):
                self._emitted += 1
                return self._outputs[self._emitted - 1]
            self._outputs, self._emitted = None, 0
            self._group_index += 1

    def get_state(self):
        if self._outputs is None:
            parent = copy.deepcopy(self._parent.get_state())
            return {"parent": parent, "group_index": self._group_index, "emitted": 0}
        return {"parent": copy.deepcopy(self._group_start), "group_index": self._group_index,
                "emitted": self._emitted}

    def set_state(self, state):
        self._parent.set_state(state["parent"])
        self._group_index = state["group_index"]
        self._outputs = None
        self._emitted = 0
        if state["emitted"]:
            self._group_start = copy.deepcopy(state["parent"])
            group = list(itertools.islice(self._parent, self._group_size))
            rng = np.random.default_rng([self._seed, self._group_index])
            self._outputs = list(self._fn(group, rng))
            self._emitted = state["emitted"]


class RegroupIterDataset(grain.IterDataset):
    """Turns each run of `group_size` examples into any number of examples, checkpointably."""

    def __init__(self, parent, fn: Callable[[list, np.random.Generator], list], group_size: int,
                 seed: int):
        if isinstance(parent, grain.MapDataset):
            parent = parent.to_iter_dataset(READ_OPTIONS)
        super().__init__(parent)
        self._fn, self._group_size, self._seed = fn, group_size, seed

    def __iter__(self):
        return _RegroupIterator(self._parent.__iter__(), self._fn, self._group_size, self._seed)

    def __str__(self):
        return f"RegroupIterDataset(group_size={self._group_size})"


# ---------------------------------------------------------------- text preprocessors


def _field(example: Example, key: str) -> Any:
    if key not in example:
        raise DataError(f"example has no field {key!r} (fields: {', '.join(sorted(example))})")
    return example[key]


@example_preprocessor
def rekey(example: Example, key_map: Mapping[str, str | None]) -> Example:
    """Renames fields: {new_name: old_name}; old_name None gives an empty string."""
    return {new: ("" if old is None else _field(example, old)) for new, old in key_map.items()}


@example_preprocessor
def tokenize(example: Example, output_features, copy_pretokenized: bool = True,
             with_eos: bool = False) -> Example:
    """Encodes each string output feature with its vocabulary; keeps `<name>_pretokenized`."""
    out = dict(example)
    for name, feature in output_features.items():
        value = example.get(name)
        if not isinstance(value, str):
            continue
        ids = feature.vocabulary.encode(value)
        if with_eos and feature.add_eos:
            ids = ids + [feature.vocabulary.eos_id]
        if copy_pretokenized:
            out[f"{name}_pretokenized"] = value
        out[name] = np.asarray(ids, dtype=np.int32)
    return out


@example_preprocessor
def append_eos(example: Example, output_features) -> Example:
    """Appends EOS to every token feature whose Feature has add_eos=True."""
    out = dict(example)
    for name, feature in output_features.items():
        if name in out and feature.add_eos:
            out[name] = np.append(np.asarray(out[name], np.int32), np.int32(feature.vocabulary.eos_id))
    return out


@example_preprocessor
def append_eos_after_trim(example: Example, output_features, sequence_length=None) -> Example:
    """Trims each add_eos feature to length-1, then appends EOS, so EOS is never cut off."""
    out = dict(example)
    for name, feature in output_features.items():
        if name not in out or not feature.add_eos:
            continue
        tokens = np.asarray(out[name], np.int32)
        if sequence_length is not None and sequence_length.get(name) is not None:
            tokens = tokens[: sequence_length[name] - 1]
        out[name] = np.append(tokens, np.int32(feature.vocabulary.eos_id))
    return out


LANGUAGE_NAMES = {
    "en": "English", "de": "German", "fr": "French", "ro": "Romanian", "es": "Spanish",
    "it": "Italian", "nl": "Dutch", "pt": "Portuguese", "ru": "Russian", "zh": "Chinese",
    "ja": "Japanese", "cs": "Czech", "fi": "Finnish", "tr": "Turkish", "pl": "Polish",
}


@example_preprocessor
def translate(example: Example, source_language: str, target_language: str) -> Example:
    """{'en': ..., 'de': ...} -> inputs 'translate English to German: ...', targets the German."""
    source_name = LANGUAGE_NAMES.get(source_language, source_language)
    target_name = LANGUAGE_NAMES.get(target_language, target_language)
    return {
        "inputs": f"translate {source_name} to {target_name}: {_field(example, source_language)}",
        "targets": _field(example, target_language),
    }


@example_preprocessor
def summarize(example: Example, article_key: str, summary_key: str) -> Example:
    """inputs 'summarize: <article>', targets the summary."""
    return {"inputs": f"summarize: {_field(example, article_key)}",
            "targets": _field(example, summary_key)}


@example_preprocessor
def classify(example: Example, text_key: str, label_key: str, prefix: str) -> Example:
    """inputs '<prefix>: <text>', targets the label as text (e.g. 'sentiment: ...' -> 'fresh')."""
    return {"inputs": f"{prefix}: {_field(example, text_key)}",
            "targets": str(_field(example, label_key))}


@example_preprocessor
def truncate_head_and_tail(example: Example, sequence_length, output_features,
                           key: str = "inputs", tail_tokens: int = 128) -> Example:
    """Keeps the first and last tokens of a long text (classification reads both ends).

    The budget is sequence_length[key], less one for EOS when the feature adds it.
    """
    if sequence_length is None or sequence_length.get(key) is None:
        return example
    budget = sequence_length[key] - (1 if output_features[key].add_eos else 0)
    tokens = np.asarray(_field(example, key), np.int32)
    if len(tokens) <= budget:
        return example
    tail = min(tail_tokens, budget)
    head = budget - tail
    return {**example, key: np.concatenate([tokens[:head], tokens[len(tokens) - tail:]])}


def _expand_choices(inputs_fn, targets_fn, is_correct_fn, mode, indexed):
    index, example = indexed
    targets = list(targets_fn(example))
    correct = [bool(c) for c in is_correct_fn(example)]
    if len(correct) != len(targets):
        raise DataError(f"rank_classification: {len(targets)} choices but {len(correct)} "
                        "is_correct flags for one example")
    inputs = inputs_fn(example)
    pairs = [
        {"idx": np.asarray([index, i], np.int32), "inputs": inputs, "targets": target,
         "is_correct": ok}
        for i, (target, ok) in enumerate(zip(targets, correct))
    ]
    return [p for p in pairs if p["is_correct"]] if mode == "train" else pairs


def _with_index(index, example):
    return None if example is None else (index, example)


def _regroup_single(expand, group, rng):
    return expand(group[0])


@dataset_preprocessor
def rank_classification(ds, inputs_fn: Callable, targets_fn: Callable,
                        is_correct_fn: Callable, mode: str = "eval"):
    """One (inputs, choice) example per answer choice, with `idx` [example, choice].

    The model scores every pair; the prediction is the best-scoring choice of each example.
    mode 'train' keeps only the correct choices. The functions must be top level (picklable).
    """
    if mode not in ("eval", "train"):
        raise DataError(f"rank_classification mode must be 'eval' or 'train', got {mode!r}")
    if not isinstance(ds, grain.MapDataset):
        raise DataError("rank_classification must come before any dataset preprocessor that "
                        "streams (it numbers examples by position)")
    expand = functools.partial(_expand_choices, inputs_fn, targets_fn, is_correct_fn, mode)
    indexed = ds.map_with_index(_with_index)
    return RegroupIterDataset(indexed, functools.partial(_regroup_single, expand), 1, 0)


# ---------------------------------------------------------------- T5 unsupervised objectives


def random_spans_helper(inputs_length: int, noise_density: float = 0.15,
                        mean_noise_span_length: float = 3.0,
                        extra_tokens_per_span_inputs: int = 1,
                        extra_tokens_per_span_targets: int = 1) -> tuple[int, int]:
    """How many raw tokens to corrupt so the inputs fill `inputs_length`; and targets length.

    Counts one sentinel per noise span on each side and one EOS. 512 -> (568, 114).
    """
    def corrupted_lengths(raw_length: int) -> tuple[int, int]:
        noise = int(round(raw_length * noise_density))
        spans = int(round(noise / mean_noise_span_length))
        return (raw_length - noise + spans * extra_tokens_per_span_inputs + 1,
                noise + spans * extra_tokens_per_span_targets + 1)

    raw_length = inputs_length - 1
    while corrupted_lengths(raw_length + 1)[0] <= inputs_length:
        raw_length += 1
    _, targets_length = corrupted_lengths(raw_length)
    # At density 0.5 prefer targets no longer than inputs (inputs length is the round number).
    if noise_density == 0.5 and targets_length > inputs_length:
        raw_length, targets_length = raw_length - 1, targets_length - 1
    return raw_length, targets_length


def _random_partition(total: int, parts: int, rng: np.random.Generator) -> np.ndarray:
    """Splits `total` items into `parts` non-empty runs, uniformly over all such splits."""
    cuts = np.sort(rng.choice(np.arange(1, total), size=parts - 1, replace=False))
    return np.diff(np.concatenate([[0], cuts, [total]]))


def random_spans_noise_mask(length: int, noise_density: float, rng: np.random.Generator,
                            mean_noise_span_length: float = 3.0) -> np.ndarray:
    """Boolean mask with round(length*density) noise tokens in spans of the given mean length.

    Spans alternate non-noise, noise, ... starting with non-noise, so the first token is
    never noise and every noise span has text before it.
    """
    padded = max(length, 2)
    num_noise = int(np.clip(np.round(padded * noise_density), 1, padded - 1))
    num_spans = max(1, int(np.round(num_noise / mean_noise_span_length)))
    num_spans = min(num_spans, num_noise, padded - num_noise)
    noise_lengths = _random_partition(num_noise, num_spans, rng)
    keep_lengths = _random_partition(padded - num_noise, num_spans, rng)
    run_lengths = np.stack([keep_lengths, noise_lengths], axis=1).reshape(-1)
    run_is_noise = np.tile([False, True], num_spans)
    return np.repeat(run_is_noise, run_lengths)[:length]


def noise_span_to_unique_sentinel(tokens, noise_mask, vocab_size: int) -> np.ndarray:
    """Replaces each run of noise tokens by one sentinel, counting down from vocab_size-1."""
    tokens = np.asarray(tokens, np.int32)
    noise_mask = np.asarray(noise_mask, bool)
    previous_is_noise = np.concatenate([[False], noise_mask[:-1]])
    span_start = noise_mask & ~previous_is_noise
    sentinels = vocab_size - np.cumsum(span_start)
    replaced = np.where(span_start, sentinels, tokens).astype(np.int32)
    return replaced[~(noise_mask & previous_is_noise)]


def nonnoise_span_to_unique_sentinel(tokens, noise_mask, vocab_size: int) -> np.ndarray:
    """The targets side: each run of kept tokens becomes one sentinel, noise stays."""
    return noise_span_to_unique_sentinel(tokens, ~np.asarray(noise_mask, bool), vocab_size)


def _select_random_chunk(example: Example, rng, feature_key: str, max_length: int):
    """One random max_length-aligned window of a long document; empty documents dropped."""
    tokens = np.asarray(example[feature_key], np.int32)
    if tokens.size == 0:
        return None
    num_windows = -(-tokens.size // max_length)
    start = max_length * int(rng.integers(num_windows))
    return {feature_key: tokens[start:start + max_length]}


def _segments(group: list[Example], segment_length: int) -> list[np.ndarray]:
    tokens = np.concatenate([ex["targets"] for ex in group])
    return [tokens[i:i + segment_length] for i in range(0, tokens.size, segment_length)]


def _corrupt_spans(group, rng, segment_length, vocab_size, noise_density,
                   mean_noise_span_length, input_key):
    out = []
    for segment in _segments(group, segment_length):
        mask = random_spans_noise_mask(segment.size, noise_density, rng, mean_noise_span_length)
        out.append({input_key: noise_span_to_unique_sentinel(segment, mask, vocab_size),
                    "targets": nonnoise_span_to_unique_sentinel(segment, mask, vocab_size)})
    return out


def _split_prefix(group, rng, segment_length, input_key):
    out = []
    for segment in _segments(group, segment_length):
        if segment.size < 2:
            continue
        split = int(rng.integers(1, segment.size))
        out.append({input_key: segment[:split], "targets": segment[split:]})
    return out


def _corrupt_iid(group, rng, segment_length, vocab_size, noise_density, input_key):
    out = []
    for segment in _segments(group, segment_length):
        mask = rng.random(segment.size) < noise_density
        out.append({input_key: noise_span_to_unique_sentinel(segment, mask, vocab_size),
                    "targets": nonnoise_span_to_unique_sentinel(segment, mask, vocab_size)})
    return out


def _needs_lengths(name: str, sequence_length, *keys) -> None:
    if sequence_length is None or any(sequence_length.get(k) is None for k in keys):
        raise DataError(f"{name} needs sequence_length with {', '.join(keys)}; pass "
                        f"sequence_length={{{', '.join(repr(k) + ': N' for k in keys)}}}")


def _chunked_documents(ds, context: PipelineContext, seed: int, max_chunk_length: int):
    chunker = ExamplePreprocessor(_select_random_chunk).bind(
        feature_key="targets", max_length=max_chunk_length)
    return chunker.apply(ds, context, seed)


@dataset_preprocessor
def span_corruption(ds, sequence_length, output_features, context, seed,
                    noise_density: float = 0.15, mean_noise_span_length: float = 3.0,
                    input_feature_key: str = "inputs", merge_examples_to_reduce_padding=True,
                    max_chunk_length: int = 65536, documents_per_merge: int = 128):
    """T5's pretraining objective on tokenized 'targets' documents.

    A random chunk of each document; documents concatenated (128 at a time) and cut into
    raw segments sized by random_spans_helper; each segment's noise spans become sentinels
    in the inputs and its kept spans sentinels in the targets. Follow with
    append_eos_after_trim: at 512 inputs this gives inputs <= 512 and targets <= 114.
    """
    _needs_lengths("span_corruption", sequence_length, input_feature_key)
    raw_length, targets_length = random_spans_helper(
        sequence_length[input_feature_key], noise_density, mean_noise_span_length)
    if sequence_length.get("targets") is not None and sequence_length["targets"] < targets_length:
        raise DataError(f"span_corruption at {sequence_length[input_feature_key]} input tokens "
                        f"makes {targets_length} target tokens; set sequence_length['targets'] "
                        f">= {targets_length}")
    ds = _chunked_documents(ds, context, seed, max_chunk_length)
    corrupt = functools.partial(
        _corrupt_spans, segment_length=raw_length,
        vocab_size=output_features["targets"].vocabulary.vocab_size,
        noise_density=noise_density, mean_noise_span_length=mean_noise_span_length,
        input_key=input_feature_key)
    group_size = documents_per_merge if merge_examples_to_reduce_padding else 1
    return RegroupIterDataset(ds, corrupt, group_size, seed)


def _segment_length(sequence_length, output_features, key):
    return sequence_length[key] - (1 if output_features[key].add_eos else 0)


@dataset_preprocessor
def prefix_lm(ds, sequence_length, output_features, context, seed,
              input_feature_key: str = "inputs", max_chunk_length: int = 65536):
    """Cuts each document into inputs-length segments, each split at a uniform random point."""
    _needs_lengths("prefix_lm", sequence_length, input_feature_key)
    ds = _chunked_documents(ds, context, seed, max_chunk_length)
    split = functools.partial(
        _split_prefix, input_key=input_feature_key,
        segment_length=_segment_length(sequence_length, output_features, input_feature_key))
    return RegroupIterDataset(ds, split, 1, seed)


@dataset_preprocessor
def iid_denoising(ds, sequence_length, output_features, context, seed,
                  noise_density: float = 0.15, input_feature_key: str = "inputs",
                  max_chunk_length: int = 65536):
    """Like span corruption, but each token is noise independently (spans of mean ~1.2)."""
    _needs_lengths("iid_denoising", sequence_length, input_feature_key)
    ds = _chunked_documents(ds, context, seed, max_chunk_length)
    corrupt = functools.partial(
        _corrupt_iid, vocab_size=output_features["targets"].vocabulary.vocab_size,
        noise_density=noise_density, input_key=input_feature_key,
        segment_length=_segment_length(sequence_length, output_features, input_feature_key))
    return RegroupIterDataset(ds, corrupt, 1, seed)
