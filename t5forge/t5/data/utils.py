"""`t5.data.utils`: T5's default vocabulary (cc_all.32000 with 100 extra ids, from
$T5FORGE_VOCAB when set (a local copy), else from T5's bucket, read when a task first needs
it) and T5's mixing-rate functions."""

from __future__ import annotations

import os

from t5forge.data.providers.mixture import mixing_rate_num_examples
from t5forge.data.vocabularies import (
    EnvironmentSentencePieceVocabulary,
    SentencePieceVocabulary,
)

DEFAULT_SPM_PATH = "gs://t5-data/vocabs/cc_all.32000/sentencepiece.model"
DEFAULT_EXTRA_IDS = 100


class T5DefaultVocabulary(EnvironmentSentencePieceVocabulary):
    """$T5FORGE_VOCAB, or DEFAULT_SPM_PATH (through t5forge.storage) when it is unset."""

    def __init__(self, extra_ids: int = DEFAULT_EXTRA_IDS):
        super().__init__(extra_ids)

    def _load(self):
        if self._processor is None:
            self.path = os.environ.get(self.env_var) or DEFAULT_SPM_PATH
        return SentencePieceVocabulary._load(self)

    def __repr__(self):
        return f"SentencePieceVocabulary(${self.env_var} or {DEFAULT_SPM_PATH}, extra_ids=100)"


def get_default_vocabulary() -> T5DefaultVocabulary:
    return T5DefaultVocabulary()


def rate_num_examples(
    task, maximum=None, temperature=1.0, scale=1.0, fallback_to_num_input_examples=True
) -> float:
    """T5's rate proportional to a task's size (its argument order differs from SeqIO's)."""
    return mixing_rate_num_examples(task, maximum=maximum, scale=scale, temperature=temperature)


def rate_unsupervised(task, value: float = 1e6) -> float:
    """T5's fixed rate for an unsupervised task in a mixture."""
    return value
