"""Text preprocessors: per-example steps over strings and token ids (rekey, tokenize, EOS,
translate / summarize / classify prompts, head-and-tail truncation, rank classification).

Tasks reach them as `pp.<name>` through the package namespace (t5forge.data.preprocessors).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import grain
import numpy as np

from t5forge.data.grain_ops.regroup import RegroupIterDataset
from t5forge.data.preprocessors.framework import (
    Example,
    batched_example_preprocessor,
    dataset_preprocessor,
    example_preprocessor,
)
from t5forge.errors import DataError


def _field(example: Example, key: str) -> Any:
    if key not in example:
        raise DataError(f"example has no field {key!r} (fields: {', '.join(sorted(example))})")
    return example[key]


@example_preprocessor
def rekey(example: Example, key_map: Mapping[str, str | None]) -> Example:
    """Renames fields: {new_name: old_name}; old_name None gives an empty string."""
    return {new: ("" if old is None else _field(example, old)) for new, old in key_map.items()}


def _text(value: str | bytes) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _with_eos(tokens, eos_id: int) -> np.ndarray:
    """tokens + [eos_id] as int32 (runs once per example and feature, so no np.append)."""
    tokens = np.asarray(tokens)
    out = np.empty(len(tokens) + 1, np.int32)
    out[:-1] = tokens
    out[-1] = eos_id
    return out


@batched_example_preprocessor
def tokenize(
    examples: list[Example], output_features, copy_pretokenized: bool = True, with_eos: bool = False
) -> list[Example]:
    """Encodes each string output feature with its vocabulary; keeps `<name>_pretokenized`.

    Each feature of a batch is encoded in one vocabulary call (sentencepiece's threads).
    UTF-8 bytes count as text, as TFDS gives Text features and SeqIO tokenizes them.
    """
    out = [dict(example) for example in examples]
    for name, feature in output_features.items():
        rows = [
            row
            for row, example in enumerate(examples)
            if isinstance(example.get(name), (str, bytes))
        ]
        texts = [_text(examples[row][name]) for row in rows]
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
    "en": "English",
    "de": "German",
    "fr": "French",
    "ro": "Romanian",
    "es": "Spanish",
    "it": "Italian",
    "nl": "Dutch",
    "pt": "Portuguese",
    "ru": "Russian",
    "zh": "Chinese",
    "ja": "Japanese",
    "cs": "Czech",
    "fi": "Finnish",
    "tr": "Turkish",
    "pl": "Polish",
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
    return {
        "inputs": f"summarize: {_field(example, article_key)}",
        "targets": _field(example, summary_key),
    }


@example_preprocessor
def classify(example: Example, text_key: str, label_key: str, prefix: str) -> Example:
    """inputs '<prefix>: <text>', targets the label as text (e.g. 'sentiment: ...' -> 'fresh')."""
    return {
        "inputs": f"{prefix}: {_field(example, text_key)}",
        "targets": str(_field(example, label_key)),
    }


@example_preprocessor
def truncate_head_and_tail(
    example: Example,
    sequence_length,
    output_features,
    key: str = "inputs",
    head_tokens: int | None = None,
    tail_tokens: int | None = None,
) -> Example:
    """Keeps the first and last tokens of a long text (classification reads both ends).

    The budget is sequence_length[key], less one for EOS when the feature adds it. Naming one
    end's share (head_tokens or tail_tokens, capped at the budget) gives the rest to the other
    end; naming neither splits the budget in half, the head taking the odd token.
    """
    if head_tokens is not None and tail_tokens is not None:
        raise DataError(
            "truncate_head_and_tail takes head_tokens or tail_tokens, not both: "
            "the other end gets the rest of the budget"
        )
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
    return {**example, key: np.concatenate([tokens[:head], tokens[len(tokens) - tail :]])}


def _expand_choices(inputs_fn, targets_fn, is_correct_fn, mode, indexed):
    index, example = indexed
    targets = list(targets_fn(example))
    correct = [bool(c) for c in is_correct_fn(example)]
    if len(correct) != len(targets):
        raise DataError(
            f"rank_classification: {len(targets)} choices but {len(correct)} "
            "is_correct flags for one example"
        )
    inputs = inputs_fn(example)
    pairs = [
        {
            "idx": np.asarray([index, i], np.int32),
            "inputs": inputs,
            "targets": target,
            "is_correct": ok,
        }
        for i, (target, ok) in enumerate(zip(targets, correct))
    ]
    return [p for p in pairs if p["is_correct"]] if mode == "train" else pairs


def _with_index(index, example):
    return None if example is None else (index, example)


def _regroup_single(expand, group, rng):
    return expand(group[0])


@dataset_preprocessor
def rank_classification(
    ds, inputs_fn: Callable, targets_fn: Callable, is_correct_fn: Callable, mode: str = "eval"
):
    """One (inputs, choice) example per answer choice, with `idx` [example, choice].

    The model scores every pair; the prediction is the best-scoring choice of each example.
    mode 'train' keeps only the correct choices. The functions must be top level (picklable).
    """
    if mode not in ("eval", "train"):
        raise DataError(f"rank_classification mode must be 'eval' or 'train', got {mode!r}")
    if not isinstance(ds, grain.MapDataset):
        raise DataError(
            "rank_classification must come before any dataset preprocessor that "
            "streams (it numbers examples by position)"
        )
    expand = functools.partial(_expand_choices, inputs_fn, targets_fn, is_correct_fn, mode)
    indexed = ds.map_with_index(_with_index)
    return RegroupIterDataset(indexed, functools.partial(_regroup_single, expand), 1, 0)
