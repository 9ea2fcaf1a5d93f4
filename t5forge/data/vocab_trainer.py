"""Trains SentencePiece vocabularies with T5's conventions, streaming text from files or tasks.

A vocabulary trained with other ids breaks every T5 tool downstream, so the layout is fixed
here: PAD=0, EOS=1, UNK=2, no BOS, `nmt_nfkc` normalisation. Sentinels (`<extra_id_N>`) are
NOT written into the model: like SeqIO, `SentencePieceVocabulary(path, extra_ids)` appends
them at load time, so the same file serves any number of extra ids. Text is streamed into
`SentencePieceTrainer.train(sentence_iterator=...)` one paragraph at a time (corpora larger
than memory work); every `heldout_every`-th paragraph is kept aside to measure the result.
"""

from __future__ import annotations

import dataclasses
import glob
import io
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence

import sentencepiece as spm

from t5forge import storage
from t5forge.data.sources.text_files import numbered_lines
from t5forge.data.vocabularies import EOS_ID, PAD_ID, UNK_ID
from t5forge.errors import ConfigError, DataError

MODEL_TYPES = ("unigram", "bpe")
_MAX_HELDOUT = 2000  # paragraphs kept aside for the summary; plenty for stable averages
_JSON_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz")


@dataclasses.dataclass(frozen=True)
class VocabSummary:
    """What a user wants to know about a new vocabulary before training a model with it."""

    path: str
    model_type: str
    vocab_size: int  # pieces in the .model file
    extra_ids: int  # sentinels SentencePieceVocabulary(path, extra_ids) will append
    training_sentences: int
    heldout_sentences: int
    character_coverage: float  # held-out characters covered by pieces (not UNK / raw bytes)
    pieces_per_word: float  # held-out pieces per whitespace-separated word

    def format(self) -> str:
        return "\n".join(
            [
                f"wrote {self.path} ({self.model_type})",
                f"  vocab size:          {self.vocab_size} pieces + {self.extra_ids} extra ids "
                f"= {self.vocab_size + self.extra_ids}",
                f"  training sentences:  {self.training_sentences}",
                f"  held-out sentences:  {self.heldout_sentences}",
                f"  character coverage:  {self.character_coverage:.4%}",
                f"  pieces per word:     {self.pieces_per_word:.3f}",
            ]
        )


def expand_inputs(specs: Sequence[str], default_field: str = "text") -> list[tuple[str, str]]:
    """(file, JSON field) per file the specs name, sorted per spec; a spec matching none fails.

    A spec is PATH or PATH:FIELD, where PATH is a file or glob and FIELD the JSON field its
    JSONL files hold the text in (`default_field` when not given), so one vocabulary can read
    `en.jsonl:text` beside `de.jsonl:de`. A PATH that itself exists is never split at ':'.
    """
    if not specs:
        raise DataError("no input given; pass --input FILES|GLOB or --task NAME")
    inputs = []
    for spec in specs:
        pattern, field = _pattern_and_field(spec, default_field)
        matches = sorted(glob.glob(os.path.expanduser(pattern)))
        if not matches:
            raise DataError(f"no input file matches {pattern!r}; check the path or glob")
        inputs.extend((m, field) for m in matches if os.path.isfile(m))
    if not inputs:
        raise DataError(f"no input files among {', '.join(specs)} (only directories matched)")
    return inputs


def _pattern_and_field(spec: str, default_field: str) -> tuple[str, str]:
    pattern, colon, field = spec.rpartition(":")
    if not (colon and pattern and field) or "/" in field or glob.glob(os.path.expanduser(spec)):
        return spec, default_field
    return pattern, field


def input_texts(inputs: Iterable[tuple[str, str]]) -> Iterator[str]:
    """Streams the texts of `expand_inputs`' (file, field) pairs, in order."""
    for path, field in inputs:
        yield from file_texts([path], field)


def file_texts(files: Iterable[str], field: str = "text") -> Iterator[str]:
    """Streams texts: the `field` of each JSON line in .jsonl(.gz) files, else each line."""
    for path in files:
        is_json = path.endswith(_JSON_SUFFIXES)
        for line_number, line in numbered_lines(path):  # non-UTF-8 bytes name file and line
            if not line.strip():
                continue
            yield _json_field(line, field, path, line_number) if is_json else line


def _json_field(line: str, field: str, path: str, line_number: int) -> str:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{line_number}: malformed JSON ({e.msg})") from None
    if not isinstance(row, dict) or field not in row:
        fields = ", ".join(row) if isinstance(row, dict) else type(row).__name__
        raise DataError(
            f"{path}:{line_number}: no field {field!r} (has: {fields}); pass --field NAME "
            "or --input PATH:NAME"
        )
    return str(row[field] or "")


def task_texts(task_name: str, field: str = "text", split: str = "train") -> Iterator[str]:
    """Streams the raw `field` of a registered task's source split (before preprocessing)."""
    from t5forge.data.providers.mixture import get_mixture_or_task

    task = get_mixture_or_task(task_name)
    source = getattr(task, "source", None)
    if source is None:
        raise DataError(f"{task_name!r} is a mixture; train a vocabulary from one of its tasks")
    for row_number, row in enumerate(source.split(split)):
        if field not in row:
            raise DataError(
                f"task {task_name!r} split {split!r} row {row_number}: no field {field!r} "
                f"(has: {', '.join(row)}); pass --field NAME"
            )
        yield str(row[field] or "")


def train_vocabulary(
    texts: Iterable[str],
    output: str | os.PathLike,
    vocab_size: int,
    extra_ids: int = 100,
    model_type: str = "unigram",
    byte_fallback: bool = False,
    input_sentence_size: int = 0,
    heldout_every: int = 100,
    progress: bool = True,
    whole_words: Sequence[str] = (),
) -> VocabSummary:
    """Trains a T5-layout SentencePiece model from `texts` and writes it to `output`.

    Each text is split into paragraphs at newlines; `input_sentence_size` > 0 makes
    SentencePiece sample that many of them (shuffled) instead of using all. Each of
    `whole_words` (e.g. a classifier's labels) becomes one piece, so it encodes to one id.
    """
    _check_arguments(vocab_size, extra_ids, model_type, input_sentence_size, heldout_every)
    storage.require_kind(output, "file", "the vocabulary output")
    heldout: list[str] = []
    counts = {"training": 0}
    reading_errors: list[DataError] = []

    def training_sentences() -> Iterator[str]:
        from tqdm import tqdm

        with tqdm(desc="reading text", unit=" sentences", disable=not progress) as bar:
            try:
                for index, sentence in enumerate(_paragraphs(texts)):
                    if index % heldout_every == heldout_every - 1 and len(heldout) < _MAX_HELDOUT:
                        heldout.append(sentence)
                        continue
                    counts["training"] += 1
                    bar.update()
                    yield sentence
            except DataError as error:  # SentencePiece would report only its own traceback
                reading_errors.append(error)
                raise

    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=training_sentences(),
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            pad_id=PAD_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
            bos_id=-1,
            normalization_rule_name="nmt_nfkc",
            byte_fallback=byte_fallback,
            input_sentence_size=input_sentence_size,
            shuffle_input_sentence=True,
            max_sentence_length=1 << 14,
            num_threads=os.cpu_count() or 1,
            minloglevel=2,
            # A word at the start of a text or after a space is '▁word' to SentencePiece.
            user_defined_symbols=[f"\u2581{word}" for word in whole_words],
        )
    except RuntimeError as e:
        if reading_errors:
            raise reading_errors[0] from None
        raise _training_error(e, vocab_size, counts["training"]) from None
    with storage.reported(output):
        storage.path(output).parent.mkdir(parents=True, exist_ok=True)
    storage.write_atomically(output, model.getvalue())  # a full disk keeps the old model
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    coverage, pieces_per_word = measure(processor, heldout)
    return VocabSummary(
        path=str(output),
        model_type=model_type,
        vocab_size=processor.get_piece_size(),
        extra_ids=extra_ids,
        training_sentences=counts["training"],
        heldout_sentences=len(heldout),
        character_coverage=coverage,
        pieces_per_word=pieces_per_word,
    )


def measure(processor: spm.SentencePieceProcessor, texts: Sequence[str]) -> tuple[float, float]:
    """(character coverage, pieces per word) of `processor` on `texts`.

    Coverage counts the normalised characters that land in real pieces; those that fall to
    UNK or to byte-fallback pieces are the ones the vocabulary does not know.
    """
    covered = uncovered = pieces = words = 0
    for text in texts:
        encoded = processor.encode(text, return_type="proto")
        for piece in encoded.pieces:
            size = len(piece.surface.strip())
            if processor.is_unknown(piece.id) or processor.is_byte(piece.id):
                uncovered += size
            else:
                covered += size
        pieces += len(encoded.pieces)
        words += len(text.split())
    total = covered + uncovered
    return (covered / total if total else 1.0), (pieces / words if words else 0.0)


def _paragraphs(texts: Iterable[str]) -> Iterator[str]:
    for text in texts:
        for paragraph in text.split("\n"):
            paragraph = paragraph.strip()
            if paragraph:
                yield paragraph


def _check_arguments(vocab_size, extra_ids, model_type, input_sentence_size, heldout_every):
    if model_type not in MODEL_TYPES:
        raise ConfigError(f"--model_type must be one of {MODEL_TYPES}, got {model_type!r}")
    if vocab_size < 4:  # pad, eos, unk and at least one real piece
        raise ConfigError(f"--vocab_size must be at least 4, got {vocab_size}")
    if extra_ids < 0:
        raise ConfigError(f"--extra_ids must be >= 0, got {extra_ids}")
    if input_sentence_size < 0:
        raise ConfigError(f"--input_sentence_size must be >= 0, got {input_sentence_size}")
    if heldout_every < 2:
        raise ConfigError(f"heldout_every must be at least 2, got {heldout_every}")


def _training_error(error: RuntimeError, vocab_size: int, sentences: int) -> DataError:
    """SentencePiece's multi-line failures as one line saying what to change."""
    message = str(error)
    if sentences == 0:
        return DataError("the input holds no text (every row empty); check --input and --field")
    limit = re.search(r"value <= (\d+)", message)
    if limit:
        return DataError(
            f"--vocab_size {vocab_size} is too large for this data: it supports at most "
            f"{limit.group(1)} pieces; lower --vocab_size or add text"
        )
    first_line = message.strip().splitlines()[-1] if message.strip() else type(error).__name__
    return DataError(f"SentencePiece training failed: {first_line}")
