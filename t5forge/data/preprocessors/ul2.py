"""UL2's mixture of denoisers (Tay et al. 2022): `ul2_objective` and the paper's seven.

The public reference is the seqio preprocessor printed in the paper's appendix (9.2); this
keeps its signature and defaults. Each example is made by one denoiser, drawn with `rates`
(uniform when None): R and X denoisers are span corruption with their own mean span length
and noise density; S is T5's prefix LM (inputs a prefix, targets the continuation, no
sentinel). A mode token (`[NLU]`, `[NLG]`, `[S2S]` in the released checkpoints) is plain
text encoded with the vocabulary and put before the inputs, as the paper's prepend_prompt.

Where t5forge differs from the appendix, so that nothing is trimmed or biased:
- a segment's raw length is chosen per denoiser so that its inputs (mode token included)
  and its targets both fit `sequence_length`, with no more spans than the vocabulary has
  sentinels; the appendix sizes by inputs only, so truncation cuts the end of X denoisers'
  targets, and (mean 3, density 0.5) at 512 inputs makes 128 spans for 100 sentinels;
- `reserved_for_packing=None` reserves room for the longest mode token (0 without them);
- the number of spans is rounded at random (`unbiased_span_count`, see
  denoising.span_count) so each denoiser's mean span length is its setting; T5's rounding
  turns (mean 64, density 0.15) at 512 inputs into one 90-token span every time. Pass
  `unbiased_span_count=False` for T5's counts.
Everything is drawn from the merge group's generator, which depends only on the seed and
the group's position, so a resumed pipeline makes the same examples.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import numpy as np

from t5forge.data.grain_ops.regroup import RegroupIterDataset
from t5forge.data.preprocessors.denoising import (
    corrupted_lengths,
    noise_span_to_unique_sentinel,
    nonnoise_span_to_unique_sentinel,
    random_spans_noise_mask,
)
from t5forge.data.preprocessors.framework import Example, dataset_preprocessor, example_preprocessor
from t5forge.data.preprocessors.token_streams import concatenated_random_chunks
from t5forge.errors import DataError

# The seven denoisers of the paper's final objective, with the released checkpoints' mode
# tokens: R (spans of 3 and 8 at 15%), X (3 and 8 at 50%, 64 at 15% and 50%), S.
UL2_DENOISERS = {
    "mean_noise_span_lengths": (3.0, 8.0, 3.0, 8.0, 64.0, 64.0),
    "noise_densities": (0.15, 0.15, 0.5, 0.5, 0.15, 0.5),
    "use_prefix_lm_task": True,
    "optional_task_prefixes": ("[NLU]", "[NLU]", "[NLG]", "[NLG]", "[NLG]", "[NLG]", "[S2S]"),
}


@dataclasses.dataclass(frozen=True)
class Denoiser:
    """One denoiser: span corruption at (mean span, density), or the prefix LM (S)."""

    mean_noise_span_length: float | None = None
    noise_density: float | None = None
    prompt: tuple[int, ...] = ()
    segment_length: int = 0

    @property
    def is_prefix_lm(self) -> bool:
        return self.noise_density is None

    def make(self, tokens, rng, vocab_size, input_key, random_roll, unbiased_span_count):
        if self.is_prefix_lm:
            split = int(rng.integers(1, tokens.size))
            inputs, targets = tokens[:split], tokens[split:]
        else:
            mask = random_spans_noise_mask(
                tokens.size,
                self.noise_density,
                rng,
                self.mean_noise_span_length,
                random_roll=random_roll,
                unbiased_span_count=unbiased_span_count,
            )
            inputs = noise_span_to_unique_sentinel(tokens, mask, vocab_size)
            targets = nonnoise_span_to_unique_sentinel(tokens, mask, vocab_size)
        if self.prompt:
            inputs = np.concatenate([np.asarray(self.prompt, np.int32), inputs])
        return {input_key: inputs, "targets": targets}


def span_segment_length(
    inputs_length: int,
    targets_length: int | None,
    noise_density: float,
    mean_noise_span_length: float,
    unbiased_span_count: bool = True,
    max_spans: int | None = None,
) -> int:
    """The most raw tokens whose corruption fits both lengths (EOS included) at any draw.

    `max_spans` (the vocabulary's sentinels) bounds the spans too: past it, sentinels would
    count down into ordinary pieces.
    """

    def fits(raw: int) -> bool:
        noise = round(raw * noise_density)
        most_spans = noise / mean_noise_span_length
        spans = max(1, math.ceil(most_spans) if unbiased_span_count else round(most_spans))
        inputs, targets = corrupted_lengths(
            raw, noise_density, mean_noise_span_length, num_spans=spans
        )
        return (
            inputs <= inputs_length
            and (targets_length is None or targets <= targets_length)
            and (max_spans is None or spans <= max_spans)
        )

    raw = 1
    while fits(raw + 1):
        raw += 1
    return raw


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise DataError(f"ul2_objective: {message}")


def _denoisers(
    sequence_length,
    output_features,
    input_feature_key,
    use_prefix_lm_task,
    mean_noise_span_lengths,
    noise_densities,
    optional_task_prefixes,
    reserved_for_packing,
    unbiased_span_count,
) -> list[Denoiser]:
    """The configured denoisers with their mode tokens encoded and segment lengths sized."""
    spans = list(zip(mean_noise_span_lengths, noise_densities))
    _check(
        len(mean_noise_span_lengths) == len(noise_densities),
        f"{len(mean_noise_span_lengths)} mean_noise_span_lengths but "
        f"{len(noise_densities)} noise_densities; give one of each per span denoiser",
    )
    count = len(spans) + int(use_prefix_lm_task)
    _check(count > 0, "no denoiser; give mean_noise_span_lengths or use_prefix_lm_task=True")
    for mean, density in spans:
        _check(0 < density < 1, f"noise density {density} is outside (0, 1)")
        _check(mean > 0, f"mean noise span length {mean} is not positive")
    prompts = optional_task_prefixes or [""] * count
    _check(
        len(prompts) == count,
        f"{len(prompts)} optional_task_prefixes for {count} denoisers; give one per denoiser "
        "(the prefix LM's last)",
    )
    _check(
        sequence_length is not None and sequence_length.get(input_feature_key) is not None,
        f"needs sequence_length[{input_feature_key!r}]",
    )
    vocabulary = output_features[input_feature_key].vocabulary
    encoded = [tuple(vocabulary.encode(p)) if p else () for p in prompts]
    reserved = max(map(len, encoded)) if reserved_for_packing is None else int(reserved_for_packing)
    inputs_length = sequence_length[input_feature_key] - reserved
    targets_length = sequence_length.get("targets")
    sentinels = getattr(output_features["targets"].vocabulary, "extra_ids", None) or None
    denoisers = []
    for (mean, density), prompt in zip(spans, encoded):
        raw = span_segment_length(
            inputs_length, targets_length, density, mean, unbiased_span_count, sentinels
        )
        _check(
            raw >= 2,
            f"sequence lengths {dict(sequence_length)} leave no room for spans of mean {mean} "
            f"at density {density} (with {reserved} tokens reserved); make them longer",
        )
        denoisers.append(Denoiser(mean, density, prompt, raw))
    if use_prefix_lm_task:
        eos = 1 if output_features[input_feature_key].add_eos else 0
        length = inputs_length - eos
        _check(length >= 2, f"sequence_length {dict(sequence_length)} is too short for S")
        denoisers.append(Denoiser(prompt=encoded[-1], segment_length=length))
    return denoisers


def _rates(rates, count: int) -> np.ndarray:
    if rates is None:
        return np.full(count, 1.0 / count)
    values = np.asarray(rates, np.float64)
    _check(
        values.shape == (count,) and (values >= 0).all() and values.sum() > 0,
        f"rates {list(rates)} must be {count} non-negative numbers, not all zero",
    )
    return values / values.sum()


def _interleave(streams: list[list], rates: np.ndarray, rng) -> list:
    """sample_from_datasets until every stream is empty: draw among those that are not."""
    streams = [list(reversed(s)) for s in streams]
    out = []
    while any(streams):
        live = np.array([bool(s) for s in streams])
        p = np.where(live, rates, 0.0)
        if p.sum() == 0:
            p = live / live.sum()
        out.append(streams[int(rng.choice(len(streams), p=p / p.sum()))].pop())
    return out


def _mix_group(group, rng, denoisers, rates, shard_ds, max_chunk_length, make):
    tokens = concatenated_random_chunks(group, rng, max_chunk_length)
    if not shard_ds:
        # Every denoiser reads the whole group; their examples are drawn with the rates.
        pieces = [
            [(d, tokens[i : i + d.segment_length]) for i in range(0, tokens.size, d.segment_length)]
            for d in denoisers
        ]
        streams = [[make(d, p, rng) for d, p in stream if p.size >= 2] for stream in pieces]
        return _interleave(streams, rates, rng)
    out, position = [], 0
    while position < tokens.size:
        denoiser = denoisers[int(rng.choice(len(denoisers), p=rates))]
        piece = tokens[position : position + denoiser.segment_length]
        position += denoiser.segment_length
        if piece.size >= 2:
            out.append(make(denoiser, piece, rng))
    return out


@dataset_preprocessor
def ul2_objective(
    ds,
    sequence_length,
    output_features,
    use_prefix_lm_task: bool = False,
    rates: Sequence[float] | None = None,
    mean_noise_span_lengths: Sequence[float] = (3.0,),
    noise_densities: Sequence[float] = (0.15,),
    shard_ds: bool = True,
    optional_task_prefixes: Sequence[str] | None = None,
    input_feature_key: str = "inputs",
    merge_examples_to_reduce_padding: bool = True,
    reserved_for_packing: int | None = None,
    seed: int = 7,
    max_chunk_length: int = 65536,
    documents_per_merge: int = 128,
    random_roll: bool = False,
    unbiased_span_count: bool = True,
):
    """UL2's mixture of denoisers over tokenized 'targets' documents (see the module doc).

    One span denoiser per (mean_noise_span_lengths[i], noise_densities[i]), plus the prefix
    LM (S) last when use_prefix_lm_task; optional_task_prefixes gives each its mode token.
    With shard_ds (the default) each segment of a merge group is made by one drawn
    denoiser, so every token is used once; without it every denoiser reads every group and
    their examples are interleaved with the rates, as the appendix's unsharded streams.
    The pipeline's per-step seed replaces the default 7 unless `seed` is bound. Use
    `**UL2_DENOISERS` for the paper's seven denoisers; follow with append_eos_after_trim.
    """
    denoisers = _denoisers(
        sequence_length,
        output_features,
        input_feature_key,
        use_prefix_lm_task,
        mean_noise_span_lengths,
        noise_densities,
        optional_task_prefixes,
        reserved_for_packing,
        unbiased_span_count,
    )
    make = functools.partial(
        Denoiser.make,
        vocab_size=output_features["targets"].vocabulary.vocab_size,
        input_key=input_feature_key,
        random_roll=random_roll,
        unbiased_span_count=unbiased_span_count,
    )
    mix = functools.partial(
        _mix_group,
        denoisers=denoisers,
        rates=_rates(rates, len(denoisers)),
        shard_ds=shard_ds,
        max_chunk_length=max_chunk_length,
        make=make,
    )
    group_size = documents_per_merge if merge_examples_to_reduce_padding else 1
    return RegroupIterDataset(ds, mix, group_size, seed)


@example_preprocessor
def prepend_prompt(
    example: Example, output_features, prompt_mode: str = "", key: str = "inputs"
) -> Example:
    """Puts the mode token's ids (plain text, encoded) before tokenized `key`, as UL2 does.

    For fine-tuning and inference after UL2 pretraining (the paper's mode switching): the
    same ids ul2_objective put before that denoiser's inputs, e.g. '[NLU]' for
    classification. Place it after tokenize, before append_eos_after_trim.
    """
    if not prompt_mode:
        return example
    prompt = output_features[key].vocabulary.encode(prompt_mode)
    tokens = np.asarray(example[key])
    return {**example, key: np.concatenate([np.asarray(prompt, tokens.dtype), tokens])}
