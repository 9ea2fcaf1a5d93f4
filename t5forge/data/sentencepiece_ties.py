"""SentencePiece's unigram segmentation with the tie order T5 tokenises with.

T5 and SeqIO tokenise through tensorflow-text, whose SentencePiece (like the Python package up
to 0.2.1) adds a piece's score to the path's in double precision and keeps path scores in single;
sentencepiece 0.2.2 and later add in single. Where two segmentations score the same, rounding
decides, and the two pick differently: "slowwwwwwwwly" is ▁slow|www|www|w to T5 and
▁slow|w|www|www to sentencepiece 0.2.3. Such ties swap blocks of pieces that spell powers of
one string ("w" and "www", ":"+"00" and ":00:00"), so only a text that repeats a string can
tie. Encodings where a piece that is such a power stands next to more of its string (0.2% of
real sentences) are segmented again here, around the repeats, with tensorflow-text's arithmetic.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import struct
from collections.abc import Sequence

import numpy as np
import sentencepiece
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "private_sentencepiece_model"
_Field = descriptor_pb2.FieldDescriptorProto
_NORMAL, _USER_DEFINED, _UNUSED, _BYTE = 1, 4, 5, 6  # ModelProto.SentencePiece.Type
_UNIGRAM = 1
_UNK_PENALTY = 10.0  # sentencepiece's kUnkPenalty
_FLT_MIN = 1.1754943508222875e-38  # where sentencepiece starts its max piece score
_FLT_MAX = 3.4028234663852886e38
_CHAR_LENGTH = b"\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"  # UTF-8 length by a first byte's high bits


@functools.cache
def _model_class():
    """The fields of sentencepiece's ModelProto read here (sentencepiece_model.proto, proto2).

    Built here rather than imported from sentencepiece, whose generated module pins the protobuf
    runtime (see vocabularies._user_defined_piece).
    """
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"{_PACKAGE}.proto", package=_PACKAGE, syntax="proto2"
    )
    piece = proto.message_type.add(name="SentencePiece")
    piece.field.add(name="piece", number=1, type=_Field.TYPE_BYTES)
    piece.field.add(name="score", number=2, type=_Field.TYPE_FLOAT)
    piece.field.add(name="type", number=3, type=_Field.TYPE_INT32, default_value="1")
    trainer = proto.message_type.add(name="TrainerSpec")
    trainer.field.add(name="model_type", number=3, type=_Field.TYPE_INT32, default_value="1")
    trainer.field.add(name="byte_fallback", number=35, type=_Field.TYPE_BOOL)
    model = proto.message_type.add(name="ModelProto")
    model.field.add(
        name="pieces",
        number=1,
        type=_Field.TYPE_MESSAGE,
        label=_Field.LABEL_REPEATED,
        type_name=f".{_PACKAGE}.SentencePiece",
    )
    model.field.add(
        name="trainer_spec",
        number=2,
        type=_Field.TYPE_MESSAGE,
        type_name=f".{_PACKAGE}.TrainerSpec",
    )
    for message in proto.message_type:
        for field in message.field:
            if not field.HasField("label"):
                field.label = _Field.LABEL_OPTIONAL
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.ModelProto"))


def _single(value: float) -> float:
    """`value` rounded to single precision, as C++ stores it in a float."""
    return struct.unpack("f", struct.pack("f", value))[0]


def _primitive_root(piece: str) -> str:
    """The shortest string of which `piece` is a power ("w" for "www", "ab" for "abab")."""
    for size in range(1, len(piece) // 2 + 1):
        if len(piece) % size == 0 and piece[:size] * (len(piece) // size) == piece:
            return piece[:size]
    return piece


class T5TieOrder:
    """Finds the encodings whose ties sentencepiece may have broken otherwise than T5 and
    re-segments them as tensorflow-text does."""

    def __init__(self, processor: sentencepiece.SentencePieceProcessor):
        self._processor = processor
        model = _model_class().FromString(processor.serialized_model_proto())
        self.applies = model.trainer_spec.model_type == _UNIGRAM
        self._byte_fallback = model.trainer_spec.byte_fallback
        self._types = [p.type for p in model.pieces]
        self._scores = [p.score for p in model.pieces]
        self._bytes = [p.piece for p in model.pieces]
        self._pieces = {
            p.piece: i
            for i, p in enumerate(model.pieces)
            if p.type in (_NORMAL, _USER_DEFINED, _UNUSED)
        }
        self._strings = [p.piece.decode("utf-8") if p.type == _NORMAL else "" for p in model.pieces]
        # pieces that are a power of a shorter string ("www", "00", ":00:00"), by that root
        roots = {i: _primitive_root(p) for i, p in enumerate(self._strings) if p}
        self._roots = {i: root for i, root in roots.items() if root != self._strings[i]}
        self._is_power = np.zeros(len(model.pieces), bool)
        self._is_power[list(self._roots)] = True
        # first and last characters, to pass over most powers ("ll" in "▁we|ll") at once
        self._first = np.array([ord(p[0]) if p else -1 for p in self._strings], np.int64)
        self._last = np.array([ord(p[-1]) if p else -1 for p in self._strings], np.int64)

    def suspects(self, encoded: Sequence[Sequence[int]]) -> list[int]:
        """Indices of the encodings with a piece that is a power of a string next to more of it.

        A tie swaps two blocks of pieces that spell powers of one string; unless neither block
        holds a piece that is itself such a power, one of them stands next to more of it.
        """
        if not self.applies or not encoded:
            return []
        lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
        if isinstance(encoded[0], np.ndarray):
            flat = np.concatenate(encoded)
        else:
            flat = np.fromiter(itertools.chain.from_iterable(encoded), np.int64, lengths.sum())
        powers = np.flatnonzero(self._is_power[flat])
        after = flat[np.minimum(powers + 1, len(flat) - 1)]  # across texts: only extra work
        before = flat[np.maximum(powers - 1, 0)]
        powers = powers[
            (self._first[after] == self._first[flat[powers]])
            | (self._last[before] == self._last[flat[powers]])
        ]
        ends = np.cumsum(lengths)
        texts = np.searchsorted(ends, powers, side="right")
        places = powers - (ends - lengths)[texts]
        return sorted(
            {
                text
                for text, at in zip(texts.tolist(), places.tolist())
                if self._next_to_root(encoded[text], at)
            }
        )

    def _next_to_root(self, ids: Sequence[int], at: int) -> bool:
        root = self._roots[int(ids[at])]
        after = before = ""
        for piece in ids[at + 1 :]:
            after += self._strings[int(piece)] or "\0"
            if len(after) >= len(root):
                break
        for piece in ids[at - 1 :: -1] if at else ():
            before = (self._strings[int(piece)] or "\0") + before
            if len(before) >= len(root):
                break
        return after.startswith(root) or before.endswith(root)

    def resolve(self, text: str) -> list[int]:
        """`text`'s ids as tensorflow-text gives them.

        Only the stretch from the piece boundary before the first repeating run to the one
        after the last is segmented again; the score of sentencepiece's path up to there is
        summed as tensorflow-text sums it, since the tie falls by its rounding.
        """
        normalized = self._processor.normalize(text).encode("utf-8")
        path = self._path(text)
        runs = [self._run(normalized, start, end, piece_id) for start, end, piece_id in path]
        runs = [run for run in runs if run is not None]
        if not runs:
            return self._ids(normalized, path)
        ends = [end for _, end, _ in path]
        first = bisect.bisect_right(ends, min(start for start, _ in runs))
        last = bisect.bisect_left(ends, max(end for _, end in runs))
        unk_score = _single(self._score_range[0] - _UNK_PENALTY)
        score = 0.0
        for start, end, piece_id in path[:first]:
            if piece_id == self._processor.unk_id():
                score = _single(unk_score + score)
            else:
                score = _single(self._score(piece_id, end - start) + score)
        start = ends[first - 1] if first else 0
        middle = self._viterbi(normalized, start, ends[last], score)
        return self._ids(normalized, path[:first] + middle + path[last + 1 :])

    def _path(self, text: str) -> list[tuple[int, int, int]]:
        """(start, end, id) of sentencepiece's own path over the normalized text, one unknown
        character per node as in the search (its output merges them or spells their bytes)."""
        path: list[tuple[int, int, int]] = []
        at = 0
        unk_id = self._processor.unk_id()
        for piece in self._processor.encode(text, return_type="proto").pieces:
            if self._types[piece.id] == _BYTE:  # the first byte of a character starts its node
                if path and path[-1][1] > at:
                    at += 1
                    continue
                length = _CHAR_LENGTH[int(piece.piece[3:5], 16) >> 4]
                path.append((at, at + length, unk_id))
                at += 1
            elif piece.id == unk_id:
                for char in piece.piece:
                    path.append((at, at + len(char.encode("utf-8")), unk_id))
                    at = path[-1][1]
            else:
                path.append((at, at + len(self._bytes[piece.id]), piece.id))
                at = path[-1][1]
        return path

    def _run(
        self, normalized: bytes, start: int, end: int, piece_id: int
    ) -> tuple[int, int] | None:
        """The stretch of whole copies of the piece's root around it, if it has more than it."""
        if piece_id not in self._roots:
            return None
        root = self._roots[piece_id].encode("utf-8")
        first, last = start, end
        while normalized.startswith(root, last):
            last += len(root)
        while first >= len(root) and normalized.startswith(root, first - len(root)):
            first -= len(root)
        return (first, last) if (first, last) != (start, end) else None

    def _ids(self, normalized: bytes, path: list[tuple[int, int, int]]) -> list[int]:
        """The ids of a path, its unknown pieces as sentencepiece gives them."""
        unk_id = self._processor.unk_id()
        ids: list[int] = []
        for start, end, piece_id in path:
            if piece_id != unk_id:
                ids.append(piece_id)
            elif self._byte_fallback:
                ids.extend(
                    self._processor.piece_to_id(f"<0x{b:02X}>") for b in normalized[start:end]
                )
            elif not ids or ids[-1] != unk_id:  # a run of unknown characters is one unknown
                ids.append(piece_id)
        return ids

    @functools.cached_property
    def _longest(self) -> int:
        """The longest piece, in bytes: how far a piece starting anywhere can reach."""
        return max(map(len, self._pieces), default=0)

    @functools.cached_property
    def _score_range(self) -> tuple[float, float]:
        normal = [s for s, t in zip(self._scores, self._types) if t == _NORMAL]
        return _single(min([_FLT_MAX, *normal])), _single(max([_FLT_MIN, *normal]))

    def _score(self, piece_id: int, length: int) -> float:
        """A piece's score in tensorflow-text's arithmetic (user-defined pieces get a bonus)."""
        if self._types[piece_id] == _USER_DEFINED:
            return _single(length * self._score_range[1]) - 0.1
        return self._scores[piece_id]

    def _viterbi(self, normalized: bytes, start: int, stop: int, score: float):
        """(start, end, id) of the best path over normalized[start:stop], from a path score
        `score` at `start`, with sentencepiece 0.1.99's arithmetic and order.

        Positions are scanned left to right; a piece's score joins the path in double
        precision, the best path to each position is kept in single, and a later candidate
        replaces it only when strictly better.
        """
        unk_score = _single(self._score_range[0] - _UNK_PENALTY)
        unk_id = self._processor.unk_id()
        best_score = {start: score}
        best_from: dict[int, tuple[int, int]] = {}
        at = start
        while at < stop:
            so_far = best_score[at]
            char_length = min(_CHAR_LENGTH[normalized[at] >> 4], stop - at)
            has_single = False
            for end in range(at + 1, min(stop, at + self._longest) + 1):
                piece_id = self._pieces.get(normalized[at:end])
                if piece_id is not None and self._types[piece_id] != _UNUSED:
                    candidate = self._score(piece_id, end - at) + so_far
                    if end not in best_from or candidate > best_score[end]:
                        best_score[end], best_from[end] = _single(candidate), (at, piece_id)
                    has_single = has_single or end - at == char_length
            if not has_single:
                end = at + char_length
                candidate = _single(unk_score + so_far)
                if end not in best_from or candidate > best_score[end]:
                    best_score[end], best_from[end] = candidate, (at, unk_id)
            at += char_length
        path = []
        end = stop
        while end > start:
            begin, piece_id = best_from[end]
            path.append((begin, end, piece_id))
            end = begin
        return path[::-1]
