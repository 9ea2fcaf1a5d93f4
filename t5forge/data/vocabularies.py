"""Vocabularies: text <-> token ids with the id layout T5 checkpoints were trained with.

Every T5-family checkpoint assumes PAD=0, EOS=1, UNK=2 and, when sentinels are used,
`<extra_id_0>` as the HIGHEST id (extra ids are appended in reverse). Getting this layout
wrong silently breaks span corruption and every pretrained model, so it lives here, once.
Vocabularies pickle without their native tokenizer (grain worker processes reload it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import sentencepiece

from t5forge import storage
from t5forge.data.sentencepiece_ties import T5TieOrder
from t5forge.data.vocabulary_locations import mapped_location, offline_hint
from t5forge.errors import DataError, StorageError

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2


def _clean_ids(ids: Sequence[int], eos_id: int, unk_id: int, size: int) -> list[int]:
    """Maps out-of-range ids to UNK and cuts after the first EOS, as T5 decoding expects."""
    clean = [unk_id if (i < 0 or i >= size) else int(i) for i in ids]
    if eos_id in clean:
        clean = clean[: clean.index(eos_id)]
    return clean


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _user_defined_piece(piece: str) -> bytes:
    """One `ModelProto.pieces` entry (piece, score 0, type USER_DEFINED), protobuf-encoded.

    Serialized protobuf messages concatenate: bytes appended to a model file append entries to
    its repeated `pieces` field. Encoding the few bytes here (field 1 = piece, 3 = type 4)
    avoids sentencepiece's generated module, which pins the protobuf runtime to the version it
    was generated with.
    """
    text = piece.encode("utf-8")
    entry = b"\x0a" + _varint(len(text)) + text + b"\x15\x00\x00\x00\x00" + b"\x18\x04"
    return b"\x0a" + _varint(len(entry)) + entry


class SentencePieceVocabulary:
    """A SentencePiece model plus `extra_ids` sentinels appended in reverse order.

    The sentinels are added to the model as user-defined pieces `▁<extra_id_N>`, so encoding
    text that contains `<extra_id_N>` yields the sentinel id and decoding gives the text back.
    The file is read where $T5FORGE_VOCAB_MAP maps `path` (t5forge.data.vocabulary_locations),
    when the vocabulary is created (`read_when_created`) or else when it is first used.
    """

    read_when_created = True  # a wrong path is reported where the vocabulary is written

    def __init__(self, path: str | os.PathLike, extra_ids: int = 0):
        self.path = str(path)
        self.extra_ids = int(extra_ids)
        if self.extra_ids < 0:
            raise DataError(f"extra_ids must be >= 0, got {extra_ids} for vocabulary {self.path}")
        self._processor: sentencepiece.SentencePieceProcessor | None = None
        if self.read_when_created:
            self._load()

    @property
    def model_file(self) -> str | None:
        """The file this vocabulary reads: `path`, or its copy through $T5FORGE_VOCAB_MAP."""
        return mapped_location(self.path) if self.path else None

    def _read_model_file(self) -> bytes:
        location = self.model_file
        named = location if location == self.path else f"{location} ({self.path}, mapped)"
        try:
            with storage.reported(location):
                return storage.path(location).read_bytes()
        except StorageError as e:
            raise StorageError(f"{e}; {offline_hint(self.path)}") from None
        except OSError as e:
            raise DataError(
                f"cannot read vocabulary file {named} ({e.strerror}); "
                "pass the path of a SentencePiece .model file"
            ) from None

    def _load(self) -> sentencepiece.SentencePieceProcessor:
        if self._processor is not None:
            return self._processor
        data = self._read_model_file()
        sentinels = b"".join(
            _user_defined_piece(f"▁<extra_id_{i}>") for i in reversed(range(self.extra_ids))
        )
        try:
            processor = sentencepiece.SentencePieceProcessor(model_proto=data + sentinels)
            if processor.GetPieceSize() <= self.extra_ids:
                raise ValueError("no pieces")
        except Exception:
            raise DataError(
                f"{self.path} is not a SentencePiece model; pass a .model file written by "
                "sentencepiece (e.g. `t5forge vocab train`)"
            ) from None
        self._processor = processor
        self._ties: T5TieOrder | None = None
        return processor

    def __getstate__(self):
        return {"path": self.path, "extra_ids": self.extra_ids}

    def __setstate__(self, state):
        self.path = state["path"]
        self.extra_ids = state["extra_ids"]
        self._processor = None

    def __eq__(self, other):
        return isinstance(other, SentencePieceVocabulary) and (self.path, self.extra_ids) == (
            other.path,
            other.extra_ids,
        )

    def __hash__(self):
        return hash((self.path, self.extra_ids))

    def __repr__(self):
        return f"SentencePieceVocabulary({self.path!r}, extra_ids={self.extra_ids})"

    @property
    def processor(self) -> sentencepiece.SentencePieceProcessor:
        """The underlying sentencepiece processor (extra ids included)."""
        return self._load()

    @property
    def vocab_size(self) -> int:
        return self.processor.get_piece_size()

    pad_id = PAD_ID

    @property
    def eos_id(self) -> int:
        return self.processor.eos_id()

    @property
    def unk_id(self) -> int:
        return self.processor.unk_id()

    @property
    def _tie_order(self) -> T5TieOrder:
        """Breaks ties between equal-scoring segmentations as T5's tokeniser does."""
        processor = self.processor
        if self._ties is None:
            self._ties = T5TieOrder(processor)
        return self._ties

    def _as_t5(self, texts: Sequence[str], encoded: list, as_ids=list) -> list:
        """sentencepiece's encodings, the few whose ties it broke otherwise than T5 (a run of
        one character or string, "slowwwwwwwwly") segmented again as T5 segments them."""
        for index in self._tie_order.suspects(encoded):
            encoded[index] = as_ids(self._tie_order.resolve(texts[index]))
        return encoded

    def encode(self, text: str) -> list[int]:
        return self._as_t5([text], [self.processor.encode(text)])[0]

    def encode_batch(self, texts: Sequence[str], num_threads: int = -1) -> list[list[int]]:
        """Encodes many texts with sentencepiece's native thread pool (-1: all cores)."""
        texts = list(texts)
        return self._as_t5(texts, self.processor.encode(texts, num_threads=num_threads))

    def encode_arrays(self, texts: Sequence[str], num_threads: int = -1) -> list[np.ndarray]:
        """int32 id arrays for many texts: one native call on sentencepiece's threads.

        The fast path of the pipeline: the GIL is released while encoding and no Python
        int lists are built. One text skips the thread pool (it would start a thread).
        """
        texts = list(texts)
        if len(texts) == 1:
            arrays = [self.processor.encode(texts[0], out_type="numpy")]
        else:
            arrays = self.processor.encode(texts, out_type="numpy", num_threads=num_threads)
        # sentencepiece's arrays are read-only views of its buffers; callers may write theirs.
        arrays = [np.array(ids) for ids in arrays]
        return self._as_t5(texts, arrays, lambda ids: np.array(ids, np.int32))

    def decode(self, ids: Sequence[int]) -> str:
        """Decodes up to the first EOS; ids past the vocabulary decode as UNK."""
        return self.processor.decode(_clean_ids(ids, self.eos_id, self.unk_id, self.vocab_size))

    def decode_batch(self, batch: Sequence[Sequence[int]], num_threads: int = -1) -> list[str]:
        cleaned = [_clean_ids(ids, self.eos_id, self.unk_id, self.vocab_size) for ids in batch]
        return self.processor.decode(cleaned, num_threads=num_threads)

    def id_to_piece(self, token_id: int) -> str:
        return self.processor.id_to_piece(int(token_id))


class EnvironmentSentencePieceVocabulary(SentencePieceVocabulary):
    """The SentencePiece model named by an environment variable, read when first used.

    Built-in tasks register at import time, before anyone has chosen a vocabulary (no
    pretrained T5 vocabulary ships with t5forge); this defers the choice to the moment the
    task is read, and says how to make one if none is set.
    """

    def __init__(self, extra_ids: int = 0, env_var: str = "T5FORGE_VOCAB"):
        self.path = None
        self.extra_ids = int(extra_ids)
        self.env_var = env_var
        self._processor = None

    def _load(self) -> sentencepiece.SentencePieceProcessor:
        """The model the variable names now: a process that points it elsewhere (`t5forge
        tasks preview --vocab`, a notebook) reads the new model, not the first one it read."""
        path = os.environ.get(self.env_var)
        if not path:
            raise DataError(
                f"no vocabulary: set {self.env_var}=/path/to/spiece.model (train one with "
                "`t5forge vocab train --input ... --vocab_size 8000 --output spiece.model`)"
            )
        if path != self.path:
            self._processor, self.path = None, path
        return super()._load()

    def __getstate__(self):
        return {"path": None, "extra_ids": self.extra_ids, "env_var": self.env_var}

    def __setstate__(self, state):
        super().__setstate__(state)
        self.env_var = state["env_var"]

    def __eq__(self, other):
        return isinstance(other, EnvironmentSentencePieceVocabulary) and (
            self.env_var,
            self.extra_ids,
        ) == (other.env_var, other.extra_ids)

    def __hash__(self):
        return hash((self.env_var, self.extra_ids))

    def __repr__(self):
        return f"SentencePieceVocabulary(${self.env_var}, extra_ids={self.extra_ids})"


class ByteVocabulary:
    """ByT5's vocabulary: UTF-8 bytes shifted by 3 (PAD, EOS, UNK), then `extra_ids` sentinels."""

    _NUM_SPECIAL = 3
    _NUM_BYTES = 256

    def __init__(self, extra_ids: int = 0):
        self.extra_ids = int(extra_ids)

    pad_id = PAD_ID
    eos_id = EOS_ID
    unk_id = UNK_ID

    def __eq__(self, other):
        return isinstance(other, ByteVocabulary) and other.extra_ids == self.extra_ids

    def __hash__(self):
        return hash(("byte", self.extra_ids))

    def __repr__(self):
        return f"ByteVocabulary(extra_ids={self.extra_ids})"

    @property
    def vocab_size(self) -> int:
        return self._NUM_SPECIAL + self._NUM_BYTES + self.extra_ids

    def encode(self, text: str) -> list[int]:
        return [b + self._NUM_SPECIAL for b in text.encode("utf-8")]

    def encode_batch(self, texts: Sequence[str], num_threads: int = -1) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def encode_arrays(self, texts: Sequence[str], num_threads: int = -1) -> list[np.ndarray]:
        """int32 id arrays, straight from the UTF-8 bytes (num_threads is not needed)."""
        return [
            np.frombuffer(t.encode("utf-8"), np.uint8).astype(np.int32) + self._NUM_SPECIAL
            for t in texts
        ]

    def decode(self, ids: Sequence[int]) -> str:
        """Decodes up to the first EOS; specials, sentinels and invalid UTF-8 are dropped."""
        base = self._NUM_SPECIAL + self._NUM_BYTES
        clean = _clean_ids(ids, self.eos_id, self.unk_id, base)
        data = bytes(i - self._NUM_SPECIAL for i in clean if i >= self._NUM_SPECIAL)
        return data.decode("utf-8", errors="ignore")

    def decode_batch(self, batch: Sequence[Sequence[int]], num_threads: int = -1) -> list[str]:
        return [self.decode(ids) for ids in batch]

    def id_to_piece(self, token_id: int) -> str:
        token_id = int(token_id)
        if token_id < self._NUM_SPECIAL:
            return ("<pad>", "</s>", "<unk>")[token_id]
        if token_id < self._NUM_SPECIAL + self._NUM_BYTES:
            return repr(bytes([token_id - self._NUM_SPECIAL]))[2:-1]
        return f"<extra_id_{self.vocab_size - 1 - token_id}>"


Vocabulary = SentencePieceVocabulary | ByteVocabulary
