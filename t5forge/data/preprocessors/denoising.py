"""T5's unsupervised objectives: span corruption, prefix LM and i.i.d. denoising.

They live apart from the text preprocessors because they are a family of their own: dataset
steps that pack many tokenized documents into fixed-length segments and corrupt them, plus
the noise-mask and sentinel helpers they share (public, as in T5, for tests and custom
objectives). Tasks reach them as `pp.span_corruption` etc. through t5forge.data.preprocessors.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from t5forge.data.grain_ops.regroup import RegroupIterDataset
from t5forge.data.preprocessors.framework import dataset_preprocessor
from t5forge.data.preprocessors.token_streams import concatenated_random_chunks
from t5forge.errors import DataError


def corrupted_lengths(
    raw_length: int,
    noise_density: float,
    mean_noise_span_length: float,
    extra_tokens_per_span_inputs: int = 1,
    extra_tokens_per_span_targets: int = 1,
    num_spans: int | None = None,
) -> tuple[int, int]:
    """(inputs, targets) lengths, EOS included, of `raw_length` tokens after span corruption.

    The noise and span counts are T5's (rounded to nearest); `num_spans` overrides the
    latter, e.g. with the most spans an unbiased count can draw.
    """
    noise = int(round(raw_length * noise_density))
    if num_spans is None:
        num_spans = int(round(noise / mean_noise_span_length))
    return (
        raw_length - noise + num_spans * extra_tokens_per_span_inputs + 1,
        noise + num_spans * extra_tokens_per_span_targets + 1,
    )


def random_spans_helper(
    inputs_length: int,
    noise_density: float = 0.15,
    mean_noise_span_length: float = 3.0,
    extra_tokens_per_span_inputs: int = 1,
    extra_tokens_per_span_targets: int = 1,
) -> tuple[int, int]:
    """How many raw tokens to corrupt so the inputs fill `inputs_length`; and targets length.

    Counts one sentinel per noise span on each side and one EOS. 512 -> (568, 114).
    """
    lengths = functools.partial(
        corrupted_lengths,
        noise_density=noise_density,
        mean_noise_span_length=mean_noise_span_length,
        extra_tokens_per_span_inputs=extra_tokens_per_span_inputs,
        extra_tokens_per_span_targets=extra_tokens_per_span_targets,
    )
    raw_length = inputs_length - 1
    while lengths(raw_length + 1)[0] <= inputs_length:
        raw_length += 1
    _, targets_length = lengths(raw_length)
    # At density 0.5 prefer targets no longer than inputs (inputs length is the round number).
    if noise_density == 0.5 and targets_length > inputs_length:
        raw_length, targets_length = raw_length - 1, targets_length - 1
    return raw_length, targets_length


def _random_segment_lengths(
    num_items: int, num_segments: int, num_rows: int, rng: np.random.Generator
) -> np.ndarray:
    """[num_rows, num_segments] run lengths: each row splits `num_items` into non-empty runs.

    Every split is equally likely (as T5's random segmentation): a fixed row of gap markers,
    num_segments - 1 of them set, is shuffled per row; a set marker ends a run.
    """
    gaps = np.zeros((num_rows, num_items - 1), bool)
    gaps[:, : num_segments - 1] = True
    _, cut_after = np.nonzero(rng.permuted(gaps, axis=1))
    bounds = np.empty((num_rows, num_segments + 1), np.int64)
    bounds[:, 0], bounds[:, -1] = 0, num_items
    bounds[:, 1:-1] = cut_after.reshape(num_rows, num_segments - 1) + 1
    return np.diff(bounds, axis=1)


def span_count(
    num_noise: int, mean_noise_span_length: float, rng=None, unbiased: bool = False
) -> int:
    """How many noise spans: T5 rounds num_noise / mean to nearest; `unbiased` rounds at random.

    The unbiased count is floor or ceil with the fraction as the probability of ceil, so the
    mean span length over many masks is `mean_noise_span_length` itself. T5's rounding is far
    from it for long spans in short segments: mean 64 at 90 noise tokens always makes one
    span of 90.
    """
    spans = num_noise / mean_noise_span_length
    if unbiased:
        whole = math.floor(spans)
        return max(1, whole + int(rng.random() < spans - whole))
    return max(1, int(np.round(spans)))


def random_spans_noise_mask(
    length: int,
    noise_density: float,
    rng: np.random.Generator,
    mean_noise_span_length: float = 3.0,
    num_rows: int | None = None,
    random_roll: bool = False,
    unbiased_span_count: bool = False,
) -> np.ndarray:
    """Boolean mask with round(length*density) noise tokens in spans of the given mean length.

    Spans alternate non-noise, noise, ... starting with non-noise, so the first token is
    never noise and every noise span has text before it. With `num_rows` it draws that many
    independent masks at once ([num_rows, length]); a whole merge group costs one call.
    T5's options: `random_roll` rotates each mask by a uniform offset (noise can then start
    the segment, and one span may wrap into two); `unbiased_span_count` (t5forge's, see
    span_count) draws each row's number of spans.
    """
    if noise_density == 0.0:
        return np.zeros(length if num_rows is None else (num_rows, length), bool)
    if unbiased_span_count and num_rows is not None:
        return np.stack(
            [
                random_spans_noise_mask(
                    length, noise_density, rng, mean_noise_span_length, None, random_roll, True
                )
                for _ in range(num_rows)
            ]
        )
    rows = 1 if num_rows is None else num_rows
    padded = max(length, 2)
    num_noise = int(np.clip(np.round(padded * noise_density), 1, padded - 1))
    num_spans = span_count(num_noise, mean_noise_span_length, rng, unbiased_span_count)
    num_spans = min(num_spans, num_noise, padded - num_noise)
    noise_lengths = _random_segment_lengths(num_noise, num_spans, rows, rng)
    keep_lengths = _random_segment_lengths(padded - num_noise, num_spans, rows, rng)
    run_lengths = np.stack([keep_lengths, noise_lengths], axis=2).reshape(-1)
    run_is_noise = np.tile([False, True], rows * num_spans)
    masks = np.repeat(run_is_noise, run_lengths).reshape(rows, padded)[:, :length]
    if random_roll:
        offsets = rng.integers(0, padded, size=rows)
        columns = (np.arange(length)[None, :] - offsets[:, None]) % length
        masks = np.take_along_axis(masks, columns, axis=1)
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


def _segment_blocks(tokens: np.ndarray, segment_length: int) -> list[np.ndarray]:
    """Consecutive segment_length pieces as 2-D blocks: the full rows, then the short tail."""
    full_rows = tokens.size // segment_length
    blocks = [tokens[: full_rows * segment_length].reshape(full_rows, segment_length)]
    if tokens.size % segment_length:
        blocks.append(tokens[full_rows * segment_length :][None])
    return [block for block in blocks if len(block)]


def _corrupt_spans(
    group,
    rng,
    segment_length,
    vocab_size,
    noise_density,
    mean_noise_span_length,
    input_key,
    max_chunk_length,
):
    out = []
    tokens = concatenated_random_chunks(group, rng, max_chunk_length)
    for block in _segment_blocks(tokens, segment_length):
        masks = random_spans_noise_mask(
            block.shape[1], noise_density, rng, mean_noise_span_length, num_rows=len(block)
        )
        inputs = noise_span_to_unique_sentinel(block, masks, vocab_size)
        targets = nonnoise_span_to_unique_sentinel(block, masks, vocab_size)
        out.extend({input_key: i, "targets": t} for i, t in zip(inputs, targets))
    return out


def _segments(tokens: np.ndarray, segment_length: int) -> list[np.ndarray]:
    return [tokens[i : i + segment_length] for i in range(0, tokens.size, segment_length)]


def _split_prefix(group, rng, segment_length, input_key, max_chunk_length):
    out = []
    for segment in _segments(
        concatenated_random_chunks(group, rng, max_chunk_length), segment_length
    ):
        if segment.size < 2:
            continue
        split = int(rng.integers(1, segment.size))
        out.append({input_key: segment[:split], "targets": segment[split:]})
    return out


def _corrupt_iid(
    group, rng, segment_length, vocab_size, noise_density, input_key, max_chunk_length
):
    out = []
    for segment in _segments(
        concatenated_random_chunks(group, rng, max_chunk_length), segment_length
    ):
        mask = rng.random(segment.size) < noise_density
        out.append(
            {
                input_key: noise_span_to_unique_sentinel(segment, mask, vocab_size),
                "targets": nonnoise_span_to_unique_sentinel(segment, mask, vocab_size),
            }
        )
    return out


def _needs_lengths(name: str, sequence_length, *keys) -> None:
    if sequence_length is None or any(sequence_length.get(k) is None for k in keys):
        raise DataError(
            f"{name} needs sequence_length with {', '.join(keys)}; pass "
            f"sequence_length={{{', '.join(repr(k) + ': N' for k in keys)}}}"
        )


@dataset_preprocessor
def span_corruption(
    ds,
    sequence_length,
    output_features,
    seed,
    noise_density: float = 0.15,
    mean_noise_span_length: float = 3.0,
    input_feature_key: str = "inputs",
    merge_examples_to_reduce_padding=True,
    max_chunk_length: int = 65536,
    documents_per_merge: int = 128,
    reserved_for_packing: int | None = None,
):
    """T5's pretraining objective on tokenized 'targets' documents.

    A random chunk of each document; documents concatenated (128 at a time) and cut into
    raw segments sized by random_spans_helper; each segment's noise spans become sentinels
    in the inputs and its kept spans sentinels in the targets. Follow with
    append_eos_after_trim: at 512 inputs this gives inputs <= 512 and targets <= 114.
    `reserved_for_packing` makes the inputs that many tokens shorter, as in T5.
    """
    _needs_lengths("span_corruption", sequence_length, input_feature_key)
    raw_length, targets_length = random_spans_helper(
        sequence_length[input_feature_key] - (reserved_for_packing or 0),
        noise_density,
        mean_noise_span_length,
    )
    if sequence_length.get("targets") is not None and sequence_length["targets"] < targets_length:
        raise DataError(
            f"span_corruption at {sequence_length[input_feature_key]} input tokens "
            f"makes {targets_length} target tokens; set sequence_length['targets'] "
            f">= {targets_length}"
        )
    corrupt = functools.partial(
        _corrupt_spans,
        segment_length=raw_length,
        max_chunk_length=max_chunk_length,
        vocab_size=output_features["targets"].vocabulary.vocab_size,
        noise_density=noise_density,
        mean_noise_span_length=mean_noise_span_length,
        input_key=input_feature_key,
    )
    group_size = documents_per_merge if merge_examples_to_reduce_padding else 1
    return RegroupIterDataset(ds, corrupt, group_size, seed)


def _segment_length(sequence_length, output_features, key):
    return sequence_length[key] - (1 if output_features[key].add_eos else 0)


@dataset_preprocessor
def prefix_lm(
    ds,
    sequence_length,
    output_features,
    seed,
    input_feature_key: str = "inputs",
    max_chunk_length: int = 65536,
):
    """Cuts each document into inputs-length segments, each split at a uniform random point."""
    _needs_lengths("prefix_lm", sequence_length, input_feature_key)
    split = functools.partial(
        _split_prefix,
        input_key=input_feature_key,
        max_chunk_length=max_chunk_length,
        segment_length=_segment_length(sequence_length, output_features, input_feature_key),
    )
    return RegroupIterDataset(ds, split, 1, seed)


@dataset_preprocessor
def iid_denoising(
    ds,
    sequence_length,
    output_features,
    seed,
    noise_density: float = 0.15,
    input_feature_key: str = "inputs",
    max_chunk_length: int = 65536,
    documents_per_merge: int = 128,
):
    """Like span corruption, but each token is noise independently (spans of mean ~1.2).

    As in T5, 128 documents are concatenated before the inputs-length segments are cut.
    """
    _needs_lengths("iid_denoising", sequence_length, input_feature_key)
    corrupt = functools.partial(
        _corrupt_iid,
        vocab_size=output_features["targets"].vocabulary.vocab_size,
        noise_density=noise_density,
        input_key=input_feature_key,
        max_chunk_length=max_chunk_length,
        segment_length=_segment_length(sequence_length, output_features, input_feature_key),
    )
    return RegroupIterDataset(ds, corrupt, documents_per_merge, seed)
