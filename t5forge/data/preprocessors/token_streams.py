"""T5's token-stream steps: pick a chunk of a document, concatenate documents, cut segments.

The unsupervised objectives are built from these (T5 composes `select_random_chunk`,
`reduce_concat_tokens` and `split_tokens` before every denoiser). t5forge's own objectives
fuse them into one regroup for speed (t5forge.data.preprocessors.denoising); the steps are public too,
with T5's names, defaults and semantics, so custom objectives and ported task modules can
compose them as they would in T5.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from t5forge.data.grain_ops.regroup import RegroupIterDataset
from t5forge.data.preprocessors.framework import Example, dataset_preprocessor, example_preprocessor
from t5forge.errors import DataError


def random_chunk_bounds(
    num_tokens: int,
    rng: np.random.Generator,
    max_length: int,
    min_length: int | None = None,
    uniform_random_start: bool = False,
) -> tuple[int, int]:
    """[start, end) of one chunk of at most max_length tokens, T5's select_random_chunk rule.

    By default the chunk is one of the aligned windows [k*max_length, (k+1)*max_length),
    chosen uniformly; a document that fits is kept whole without a draw. With
    `uniform_random_start` the start is uniform in [-length+1, num_tokens) and clipped, and
    with `min_length` the length is uniform in [min_length, max_length).
    """
    length = max_length if min_length is None else int(rng.integers(min_length, max_length))
    if uniform_random_start:
        start = int(rng.integers(-length + 1, num_tokens))
        return max(start, 0), min(start + length, num_tokens)
    if num_tokens <= length:
        return 0, num_tokens
    start = length * int(rng.integers(-(-num_tokens // length)))
    return start, min(start + length, num_tokens)


def concatenated_random_chunks(
    group: list[Example], rng: np.random.Generator, max_chunk_length: int
) -> np.ndarray:
    """The group's 'targets' documents end to end, each cut to one random chunk.

    select_random_chunk and reduce_concat_tokens fused, for the objectives that run them
    on every merge group (empty documents add nothing).
    """
    chunks = []
    for example in group:
        tokens = example["targets"]
        start, end = random_chunk_bounds(len(tokens), rng, max_chunk_length)
        chunks.append(tokens[start:end])
    return np.concatenate(chunks).astype(np.int32, copy=False) if chunks else np.zeros(0, np.int32)


def _length_for(name, key, sequence_length, output_features) -> int:
    """sequence_length[key], less one when the feature gets an EOS later."""
    if sequence_length is None or sequence_length.get(key) is None:
        raise DataError(f"{name} needs max_length or sequence_length[{key!r}]")
    eos = 1 if output_features and key in output_features and output_features[key].add_eos else 0
    return sequence_length[key] - eos


def _check_passthrough(name, split_keys, passthrough_feature_keys):
    overlap = set(split_keys) & set(passthrough_feature_keys or ())
    if overlap:
        raise DataError(f"{name}: keys {sorted(overlap)} are both cut and passed through")


@example_preprocessor
def select_random_chunk(
    example: Example,
    rng: np.random.Generator,
    output_features=None,
    max_length: int | None = None,
    feature_key: str = "targets",
    additional_feature_keys: Sequence[str] | None = None,
    passthrough_feature_keys: Sequence[str] | None = None,
    sequence_length=None,
    uniform_random_start: bool = False,
    min_length: int | None = None,
) -> Example | None:
    """Keeps one random chunk of `feature_key` (and the same span of the additional keys).

    max_length defaults to sequence_length[feature_key] (less one for EOS). Other keys are
    dropped unless passed through; empty documents are dropped, as in T5.
    """
    _check_passthrough(
        "select_random_chunk",
        [feature_key, *(additional_feature_keys or ())],
        passthrough_feature_keys,
    )
    if max_length is None:
        max_length = _length_for(
            "select_random_chunk", feature_key, sequence_length, output_features
        )
    tokens = np.asarray(example[feature_key])
    if tokens.size == 0:
        return None
    start, end = random_chunk_bounds(
        tokens.shape[0], rng, max_length, min_length, uniform_random_start
    )
    chunk = {feature_key: tokens[start:end]}
    for key in additional_feature_keys or ():
        values = np.asarray(example[key])
        if values.shape[0] != tokens.shape[0]:
            raise DataError(
                f"select_random_chunk: feature {key!r} has {values.shape[0]} items where "
                f"{feature_key!r} has {tokens.shape[0]}; additional keys must be as long"
            )
        chunk[key] = values[start:end]
    chunk.update({key: example[key] for key in passthrough_feature_keys or ()})
    return chunk


def _concatenate(group: list[Example], rng, feature_key: str) -> list[Example]:
    tokens = [np.asarray(example[feature_key]) for example in group]
    joined = np.concatenate(tokens) if tokens else np.zeros(0, np.int32)
    # T5 concatenates padded batches and drops every id 0 (padding) on the way.
    return [{feature_key: joined[joined != 0]}]


@dataset_preprocessor
def reduce_concat_tokens(ds, seed, feature_key: str = "targets", batch_size: int = 128):
    """Concatenates each run of `batch_size` documents' `feature_key` into one example.

    Only `feature_key` is kept, and ids 0 (padding) are dropped, as in T5. Follow with
    split_tokens to make examples of exactly the right length.
    """
    return RegroupIterDataset(
        ds, functools.partial(_concatenate, feature_key=feature_key), batch_size, seed
    )


def _split(
    group, rng, min_tokens, max_tokens, feature_key, additional_feature_keys, passthrough_keys
):
    (example,) = group
    tokens = np.asarray(example[feature_key])
    if tokens.size == 0:
        return []
    length = max_tokens
    if min_tokens is not None:
        # Log-uniform in [min, max), drawn once per document.
        length = int(math.exp(rng.uniform(math.log(min_tokens), math.log(max_tokens))))
    arrays = {key: np.asarray(example[key]) for key in (feature_key, *additional_feature_keys)}
    for key, values in arrays.items():
        if values.shape[0] != tokens.shape[0]:
            raise DataError(
                f"split_tokens: feature {key!r} is not as long as {feature_key!r} "
                f"({values.shape[0]} against {tokens.shape[0]})"
            )
    passthrough = {key: example[key] for key in passthrough_keys or ()}
    return [
        {**{key: values[i : i + length] for key, values in arrays.items()}, **passthrough}
        for i in range(0, tokens.shape[0], length)
    ]


@dataset_preprocessor
def split_tokens(
    ds,
    seed,
    min_tokens_per_segment: int | None = None,
    max_tokens_per_segment: int | None = None,
    feature_key: str = "targets",
    additional_feature_keys: Sequence[str] | None = None,
    passthrough_feature_keys: Sequence[str] | None = None,
):
    """Cuts each example's `feature_key` into segments of max_tokens_per_segment tokens.

    Only a document's last segment is shorter. With min_tokens_per_segment the length is
    drawn per document, log-uniformly in [min, max). Empty examples are dropped.
    """
    if max_tokens_per_segment is None:
        raise DataError("split_tokens needs max_tokens_per_segment")
    _check_passthrough(
        "split_tokens", [feature_key, *(additional_feature_keys or ())], passthrough_feature_keys
    )
    split = functools.partial(
        _split,
        min_tokens=min_tokens_per_segment,
        max_tokens=max_tokens_per_segment,
        feature_key=feature_key,
        additional_feature_keys=tuple(additional_feature_keys or ()),
        passthrough_keys=passthrough_feature_keys,
    )
    return RegroupIterDataset(ds, split, 1, seed)


def _split_to(name, key, min_tokens=None):
    def step(ds, sequence_length, output_features, seed, **kwargs):
        max_tokens = _length_for(name, key, sequence_length, output_features)
        return split_tokens.fn(
            ds,
            seed,
            min_tokens_per_segment=min_tokens,
            max_tokens_per_segment=max_tokens,
            **kwargs,
        )

    step.__name__ = step.__qualname__ = name
    step.__doc__ = (
        f"split_tokens at sequence_length[{key!r}] (less one for EOS)"
        + (f", lengths log-uniform from {min_tokens}" if min_tokens else "")
        + "."
    )
    return dataset_preprocessor(step)


split_tokens_to_inputs_length = _split_to("split_tokens_to_inputs_length", "inputs")
split_tokens_to_targets_length = _split_to("split_tokens_to_targets_length", "targets")
split_tokens_to_random_length = _split_to("split_tokens_to_random_length", "inputs", 8)
