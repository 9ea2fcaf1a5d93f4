"""`seqio.preprocessors`: t5forge's preprocessors (t5forge.data.preprocessors) plus the SeqIO
steps that only SeqIO names: tokenize_and_append_eos and truncate_inputs_left."""

from __future__ import annotations

import numpy as np

from t5forge.data.preprocessors import *  # noqa: F403  (SeqIO's namespace is t5forge's)
from t5forge.data.preprocessors import (
    Example,
    batched_example_preprocessor,
    example_preprocessor,
    tokenize,
)


@batched_example_preprocessor
def tokenize_and_append_eos(
    examples: list[Example], output_features, copy_pretokenized: bool = True
) -> list[Example]:
    """tokenize, then EOS after every feature whose Feature has add_eos (no trimming)."""
    return tokenize.fn(examples, output_features, copy_pretokenized, with_eos=True)


@example_preprocessor
def truncate_inputs_left(example: Example, sequence_length) -> Example:
    """Keeps the last sequence_length['inputs'] tokens of `inputs` (decoder-only models
    lose the start of a long prompt rather than its end); after tokenize and append_eos."""
    if sequence_length is None or "inputs" not in sequence_length:
        return example
    return {**example, "inputs": np.asarray(example["inputs"])[-sequence_length["inputs"] :]}
