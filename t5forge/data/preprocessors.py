"""Preprocessors: the steps that turn raw source rows into model features, as grain transforms.

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
import numpy as np

from t5forge.data.regroup import READ_OPTIONS as READ_OPTIONS  # tasks import it from here
from t5forge.data.regroup import BatchMapDataset, RegroupIterDataset
from t5forge.errors import DataError

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
    """Re-raises a step's DataError with the task and step named in front."""
    try:
        yield
    except DataError as e:
        raise DataError(f"task {task_name!r}, preprocessor {step_name}: {e}") from None


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


# ---------------------------------------------------------------- text preprocessors


def _field(example: Example, key: str) -> Any:
    if key not in example:
        raise DataError(f"example has no field {key!r} (fields: {', '.join(sorted(example))})")
    return example[key]


@example_preprocessor
def rekey(example: Example, key_map: Mapping[str, str | None]) -> Example:
    """Renames fields: {new_name: old_name}; old_name None gives an empty string."""
    return {new: ("" if old is None else _field(example, old)) for new, old in key_map.items()}


def _with_eos(tokens, eos_id: int) -> np.ndarray:
    """tokens + [eos_id] as int32 (runs once per example and feature, so no np.append)."""
    tokens = np.asarray(tokens)
    out = np.empty(len(tokens) + 1, np.int32)
    out[:-1] = tokens
    out[-1] = eos_id
    return out


@batched_example_preprocessor
def tokenize(examples: list[Example], output_features, copy_pretokenized: bool = True,
             with_eos: bool = False) -> list[Example]:
    """Encodes each string output feature with its vocabulary; keeps `<name>_pretokenized`.

    Each feature of a batch is encoded in one vocabulary call (sentencepiece's threads).
    """
    out = [dict(example) for example in examples]
    for name, feature in output_features.items():
        rows = [row for row, example in enumerate(examples) if isinstance(example.get(name), str)]
        texts = [examples[row][name] for row in rows]
        for row, text, ids in zip(rows, texts, feature.vocabulary.encode_arrays(texts)):
            if copy_pretokenized:
                out[row][f"{name}_pretokenized"] = text
            if with_eos and feature.add_eos:
                ids = _with_eos(ids, feature.vocabulary.eos_id)
            out[row][name] = ids
    return out


@example_preprocessor
def append_eos(example: Example, output_features) -> Example:
    """Appends EOS to every token feature whose Feature has add_eos=True."""
    out = dict(example)
    for name, feature in output_features.items():
        if name in out and feature.add_eos:
            out[name] = _with_eos(out[name], feature.vocabulary.eos_id)
    return out


@example_preprocessor
def append_eos_after_trim(example: Example, output_features, sequence_length=None) -> Example:
    """Trims each add_eos feature to length-1, then appends EOS, so EOS is never cut off."""
    out = dict(example)
    for name, feature in output_features.items():
        if name not in out or not feature.add_eos:
            continue
        tokens = out[name]
        if sequence_length is not None and sequence_length.get(name) is not None:
            tokens = tokens[: sequence_length[name] - 1]
        out[name] = _with_eos(tokens, feature.vocabulary.eos_id)
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
                           key: str = "inputs", head_tokens: int | None = None,
                           tail_tokens: int | None = None) -> Example:
    """Keeps the first and last tokens of a long text (classification reads both ends).

    The budget is sequence_length[key], less one for EOS when the feature adds it. Naming one
    end's share (head_tokens or tail_tokens, capped at the budget) gives the rest to the other
    end; naming neither splits the budget in half, the head taking the odd token.
    """
    if head_tokens is not None and tail_tokens is not None:
        raise DataError("truncate_head_and_tail takes head_tokens or tail_tokens, not both: "
                        "the other end gets the rest of the budget")
    if sequence_length is None or sequence_length.get(key) is None:
        return example
    budget = sequence_length[key] - (1 if output_features[key].add_eos else 0)
    tokens = np.asarray(_field(example, key), np.int32)
    if len(tokens) <= budget:
        return example
    if tail_tokens is not None:
        tail = min(tail_tokens, budget)
    elif head_tokens is not None:
        tail = budget - min(head_tokens, budget)
    else:
        tail = budget // 2
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


def _random_segment_lengths(num_items: int, num_segments: int, num_rows: int,
                            rng: np.random.Generator) -> np.ndarray:
    """[num_rows, num_segments] run lengths: each row splits `num_items` into non-empty runs.

    Every split is equally likely (as T5's random segmentation): a fixed row of gap markers,
    num_segments - 1 of them set, is shuffled per row; a set marker ends a run.
    """
    gaps = np.zeros((num_rows, num_items - 1), bool)
    gaps[:, :num_segments - 1] = True
    _, cut_after = np.nonzero(rng.permuted(gaps, axis=1))
    bounds = np.empty((num_rows, num_segments + 1), np.int64)
    bounds[:, 0], bounds[:, -1] = 0, num_items
    bounds[:, 1:-1] = cut_after.reshape(num_rows, num_segments - 1) + 1
    return np.diff(bounds, axis=1)


def random_spans_noise_mask(length: int, noise_density: float, rng: np.random.Generator,
                            mean_noise_span_length: float = 3.0,
                            num_rows: int | None = None) -> np.ndarray:
    """Boolean mask with round(length*density) noise tokens in spans of the given mean length.

    Spans alternate non-noise, noise, ... starting with non-noise, so the first token is
    never noise and every noise span has text before it. With `num_rows` it draws that many
    independent masks at once ([num_rows, length]); a whole merge group costs one call.
    """
    rows = 1 if num_rows is None else num_rows
    padded = max(length, 2)
    num_noise = int(np.clip(np.round(padded * noise_density), 1, padded - 1))
    num_spans = max(1, int(np.round(num_noise / mean_noise_span_length)))
    num_spans = min(num_spans, num_noise, padded - num_noise)
    noise_lengths = _random_segment_lengths(num_noise, num_spans, rows, rng)
    keep_lengths = _random_segment_lengths(padded - num_noise, num_spans, rows, rng)
    run_lengths = np.stack([keep_lengths, noise_lengths], axis=2).reshape(-1)
    run_is_noise = np.tile([False, True], rows * num_spans)
    masks = np.repeat(run_is_noise, run_lengths).reshape(rows, padded)[:, :length]
    return masks[0] if num_rows is None else masks


def noise_span_to_unique_sentinel(tokens, noise_mask, vocab_size: int) -> np.ndarray:
    """Replaces each run of noise tokens by one sentinel, counting down from vocab_size-1.

    Works along the last axis; 2-D rows must have equal numbers of noise tokens and spans
    (as the masks of one random_spans_noise_mask call do).
    """
    tokens = np.asarray(tokens, np.int32)
    noise_mask = np.asarray(noise_mask, bool)
    previous_is_noise = np.zeros_like(noise_mask)
    previous_is_noise[..., 1:] = noise_mask[..., :-1]
    span_start = noise_mask & ~previous_is_noise
    sentinels = vocab_size - np.cumsum(span_start, axis=-1, dtype=np.int32)
    replaced = np.where(span_start, sentinels, tokens)
    kept = replaced[~(noise_mask & previous_is_noise)]
    return kept.reshape(*tokens.shape[:-1], -1)


def nonnoise_span_to_unique_sentinel(tokens, noise_mask, vocab_size: int) -> np.ndarray:
    """The targets side: each run of kept tokens becomes one sentinel, noise stays."""
    return noise_span_to_unique_sentinel(tokens, ~np.asarray(noise_mask, bool), vocab_size)


def _concatenated_chunks(group: list[Example], rng: np.random.Generator,
                         max_chunk_length: int) -> np.ndarray:
    """The group's 'targets' documents end to end, each cut to one random aligned window.

    A document longer than max_chunk_length keeps one of its max_chunk_length windows,
    chosen uniformly (T5's select_random_chunk); empty documents add nothing.
    """
    chunks = []
    for example in group:
        tokens = example["targets"]
        if len(tokens) > max_chunk_length:
            num_windows = -(-len(tokens) // max_chunk_length)
            start = max_chunk_length * int(rng.integers(num_windows))
            tokens = tokens[start:start + max_chunk_length]
        chunks.append(tokens)
    return np.concatenate(chunks).astype(np.int32, copy=False) if chunks else np.zeros(0, np.int32)


def _segment_blocks(tokens: np.ndarray, segment_length: int) -> list[np.ndarray]:
    """Consecutive segment_length pieces as 2-D blocks: the full rows, then the short tail."""
    full_rows = tokens.size // segment_length
    blocks = [tokens[:full_rows * segment_length].reshape(full_rows, segment_length)]
    if tokens.size % segment_length:
        blocks.append(tokens[full_rows * segment_length:][None])
    return [block for block in blocks if len(block)]


def _corrupt_spans(group, rng, segment_length, vocab_size, noise_density,
                   mean_noise_span_length, input_key, max_chunk_length):
    out = []
    tokens = _concatenated_chunks(group, rng, max_chunk_length)
    for block in _segment_blocks(tokens, segment_length):
        masks = random_spans_noise_mask(block.shape[1], noise_density, rng,
                                        mean_noise_span_length, num_rows=len(block))
        inputs = noise_span_to_unique_sentinel(block, masks, vocab_size)
        targets = nonnoise_span_to_unique_sentinel(block, masks, vocab_size)
        out.extend({input_key: i, "targets": t} for i, t in zip(inputs, targets))
    return out


def _segments(tokens: np.ndarray, segment_length: int) -> list[np.ndarray]:
    return [tokens[i:i + segment_length] for i in range(0, tokens.size, segment_length)]


def _split_prefix(group, rng, segment_length, input_key, max_chunk_length):
    out = []
    for segment in _segments(_concatenated_chunks(group, rng, max_chunk_length), segment_length):
        if segment.size < 2:
            continue
        split = int(rng.integers(1, segment.size))
        out.append({input_key: segment[:split], "targets": segment[split:]})
    return out


def _corrupt_iid(group, rng, segment_length, vocab_size, noise_density, input_key,
                 max_chunk_length):
    out = []
    for segment in _segments(_concatenated_chunks(group, rng, max_chunk_length), segment_length):
        mask = rng.random(segment.size) < noise_density
        out.append({input_key: noise_span_to_unique_sentinel(segment, mask, vocab_size),
                    "targets": nonnoise_span_to_unique_sentinel(segment, mask, vocab_size)})
    return out


def _needs_lengths(name: str, sequence_length, *keys) -> None:
    if sequence_length is None or any(sequence_length.get(k) is None for k in keys):
        raise DataError(f"{name} needs sequence_length with {', '.join(keys)}; pass "
                        f"sequence_length={{{', '.join(repr(k) + ': N' for k in keys)}}}")


@dataset_preprocessor
def span_corruption(ds, sequence_length, output_features, seed,
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
    corrupt = functools.partial(
        _corrupt_spans, segment_length=raw_length, max_chunk_length=max_chunk_length,
        vocab_size=output_features["targets"].vocabulary.vocab_size,
        noise_density=noise_density, mean_noise_span_length=mean_noise_span_length,
        input_key=input_feature_key)
    group_size = documents_per_merge if merge_examples_to_reduce_padding else 1
    return RegroupIterDataset(ds, corrupt, group_size, seed)


def _segment_length(sequence_length, output_features, key):
    return sequence_length[key] - (1 if output_features[key].add_eos else 0)


@dataset_preprocessor
def prefix_lm(ds, sequence_length, output_features, seed,
              input_feature_key: str = "inputs", max_chunk_length: int = 65536):
    """Cuts each document into inputs-length segments, each split at a uniform random point."""
    _needs_lengths("prefix_lm", sequence_length, input_feature_key)
    split = functools.partial(
        _split_prefix, input_key=input_feature_key, max_chunk_length=max_chunk_length,
        segment_length=_segment_length(sequence_length, output_features, input_feature_key))
    return RegroupIterDataset(ds, split, 1, seed)


@dataset_preprocessor
def iid_denoising(ds, sequence_length, output_features, seed,
                  noise_density: float = 0.15, input_feature_key: str = "inputs",
                  max_chunk_length: int = 65536):
    """Like span corruption, but each token is noise independently (spans of mean ~1.2)."""
    _needs_lengths("iid_denoising", sequence_length, input_feature_key)
    corrupt = functools.partial(
        _corrupt_iid, vocab_size=output_features["targets"].vocabulary.vocab_size,
        noise_density=noise_density, input_key=input_feature_key,
        max_chunk_length=max_chunk_length,
        segment_length=_segment_length(sequence_length, output_features, input_feature_key))
    return RegroupIterDataset(ds, corrupt, 1, seed)
