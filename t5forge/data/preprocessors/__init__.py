"""Preprocessors: the steps that turn raw source rows into model features, as grain transforms.

This package is the namespace tasks are written against (`from t5forge.data import
preprocessors as pp`, as `seqio.preprocessors`): every step is `pp.<name>`. The steps live by
family: framework (how a step runs in a pipeline), text (per-example text steps),
token_streams (T5's chunk / concatenate / split steps), denoising (T5's unsupervised
objectives) and ul2 (UL2's mixture of denoisers).
"""

# Re-exported so tasks, gin files and pickled steps that name them here resolve.
from t5forge.data.preprocessors.denoising import (
    iid_denoising,
    noise_span_to_unique_sentinel,
    nonnoise_span_to_unique_sentinel,
    prefix_lm,
    random_spans_helper,
    random_spans_noise_mask,
    span_corruption,
)
from t5forge.data.preprocessors.framework import (
    BatchedExamplePreprocessor,
    CacheDatasetPlaceholder,
    DatasetPreprocessor,
    Example,
    ExamplePreprocessor,
    PipelineContext,
    Preprocessor,
    as_preprocessor,
    batched_example_preprocessor,
    dataset_preprocessor,
    example_preprocessor,
)
from t5forge.data.preprocessors.text import (
    LANGUAGE_NAMES,
    append_eos,
    append_eos_after_trim,
    classify,
    rank_classification,
    rekey,
    summarize,
    tokenize,
    translate,
    truncate_head_and_tail,
)
from t5forge.data.preprocessors.token_streams import (
    reduce_concat_tokens,
    select_random_chunk,
    split_tokens,
    split_tokens_to_inputs_length,
    split_tokens_to_random_length,
    split_tokens_to_targets_length,
)
from t5forge.data.preprocessors.ul2 import UL2_DENOISERS, prepend_prompt, ul2_objective

__all__ = [
    "LANGUAGE_NAMES",
    "UL2_DENOISERS",
    "BatchedExamplePreprocessor",
    "CacheDatasetPlaceholder",
    "DatasetPreprocessor",
    "Example",
    "ExamplePreprocessor",
    "PipelineContext",
    "Preprocessor",
    "append_eos",
    "append_eos_after_trim",
    "as_preprocessor",
    "batched_example_preprocessor",
    "classify",
    "dataset_preprocessor",
    "example_preprocessor",
    "iid_denoising",
    "noise_span_to_unique_sentinel",
    "nonnoise_span_to_unique_sentinel",
    "prefix_lm",
    "prepend_prompt",
    "random_spans_helper",
    "random_spans_noise_mask",
    "rank_classification",
    "reduce_concat_tokens",
    "rekey",
    "select_random_chunk",
    "span_corruption",
    "split_tokens",
    "split_tokens_to_inputs_length",
    "split_tokens_to_random_length",
    "split_tokens_to_targets_length",
    "summarize",
    "tokenize",
    "translate",
    "truncate_head_and_tail",
    "ul2_objective",
]
