"""SeqIO's vocabularies in SeqIO's signatures, over t5forge's (t5forge.data.vocabularies)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from t5forge.data import vocabularies as _vocabularies
from t5forge.data.vocabularies import PAD_ID, ByteVocabulary, Vocabulary
from t5forge.errors import ConfigError

__all__ = [
    "PAD_ID",
    "ByteVocabulary",
    "PassThroughVocabulary",
    "SentencePieceVocabulary",
    "Vocabulary",
]


class SentencePieceVocabulary(_vocabularies.SentencePieceVocabulary):
    """SeqIO's signature: `SentencePieceVocabulary(sentencepiece_model_file, extra_ids=None)`,
    and SeqIO's timing: the file is read when first used, so a task module that names a bucket
    (T5X's README names gs://t5-data/...) imports on a machine without access to it."""

    read_when_created = False

    def __init__(
        self,
        sentencepiece_model_file: str,
        extra_ids: int | None = None,
        normalizer_spec_overrides=None,
        reverse_extra_ids: bool = True,
        use_fast_tokenizer: bool = False,
    ):
        if normalizer_spec_overrides is not None:
            raise ConfigError(
                "normalizer_spec_overrides is not supported; train the "
                "vocabulary with the normalizer you need (t5forge vocab train)"
            )
        if not reverse_extra_ids:
            raise ConfigError(
                "reverse_extra_ids=False is not supported: <extra_id_0> is "
                "always the last id, as in T5"
            )
        super().__init__(sentencepiece_model_file, extra_ids or 0)


class PassThroughVocabulary:
    """SeqIO's `PassThroughVocabulary(size, eos_id=None)`: features that already hold ids
    (encode and decode return them unchanged)."""

    pad_id = PAD_ID
    unk_id = None
    extra_ids = 0

    def __init__(self, size: int, eos_id: int | None = None):
        self.size = self.vocab_size = int(size)
        self.eos_id = eos_id

    def __eq__(self, other):
        return isinstance(other, PassThroughVocabulary) and (self.size, self.eos_id) == (
            other.size,
            other.eos_id,
        )

    def __hash__(self):
        return hash(("pass-through", self.size, self.eos_id))

    def __repr__(self):
        return f"PassThroughVocabulary(size={self.size}, eos_id={self.eos_id})"

    def encode(self, ids: Sequence[int]) -> list[int]:
        return list(ids)

    def encode_arrays(self, batch, num_threads: int = -1) -> list[np.ndarray]:
        return [np.asarray(ids, np.int32) for ids in batch]

    def decode(self, ids: Sequence[int]) -> list[int]:
        return [int(i) for i in ids]

    def decode_batch(self, batch, num_threads: int = -1) -> list[list[int]]:
        return [self.decode(ids) for ids in batch]

    def id_to_piece(self, token_id: int) -> str:
        return str(int(token_id))
