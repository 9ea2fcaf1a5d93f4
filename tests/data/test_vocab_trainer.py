"""Vocabulary training on the real English corpus: T5's id layout, sentinels at the top ids,
lossless round trips on the validation split, and one-line errors for bad input."""

import gzip
import json

import pytest
import sentencepiece

from t5forge.data import (
    Feature,
    JsonLinesSource,
    SentencePieceVocabulary,
    TaskRegistry,
    vocab_trainer,
)
from t5forge.errors import ConfigError, DataError


def _normalized(processor: sentencepiece.SentencePieceProcessor, text: str) -> str:
    """The text as the model's normaliser sees it: what a lossless round trip must give back."""
    return processor.normalize(text).replace("▁", " ").strip()


@pytest.fixture(scope="module")
def english(shared_data):
    return shared_data / "english_corpus"


@pytest.fixture(scope="module")
def trained(english, tmp_path_factory):
    """8000 pieces from ~16k sampled paragraphs (~2.5 MB) of the train split, byte fallback."""
    output = tmp_path_factory.mktemp("vocab") / "spiece.model"
    inputs = vocab_trainer.expand_inputs([str(english / "train.jsonl.gz")])
    summary = vocab_trainer.train_vocabulary(
        vocab_trainer.input_texts(inputs),
        output,
        vocab_size=8000,
        extra_ids=100,
        byte_fallback=True,
        input_sentence_size=16_000,
        progress=False,
    )
    return output, summary


def test_model_has_t5_id_layout_and_normaliser(trained):
    output, summary = trained
    model = sentencepiece.SentencePieceProcessor(model_file=str(output))
    assert [model.IdToPiece(i) for i in range(3)] == ["<pad>", "</s>", "<unk>"]
    assert (model.pad_id(), model.eos_id(), model.unk_id(), model.bos_id()) == (0, 1, 2, -1)
    # nmt_nfkc folds compatibility forms: full-width letters encode as the ASCII word.
    assert model.EncodeAsIds("ｆｕｌｌ") == model.EncodeAsIds("full")
    assert model.GetPieceSize() == 8000 == summary.vocab_size
    assert not any("extra_id" in model.IdToPiece(i) for i in range(model.GetPieceSize()))


def test_summary_numbers(trained):
    _, summary = trained
    assert summary.training_sentences > 100_000  # every paragraph streamed; SP samples 16k
    assert 1000 <= summary.heldout_sentences <= 2000
    assert 0.999 < summary.character_coverage <= 1.0
    assert 1.2 < summary.pieces_per_word < 1.8
    text = summary.format()
    assert "8000 pieces + 100 extra ids = 8100" in text and "character coverage" in text


def test_extra_ids_sit_at_the_top(trained):
    vocab = SentencePieceVocabulary(trained[0], extra_ids=100)
    assert vocab.vocab_size == 8100
    assert vocab.encode("<extra_id_0>") == [8099]
    assert vocab.encode("<extra_id_99>") == [8000]
    assert (vocab.pad_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2)


def test_validation_split_round_trips_losslessly(trained, english):
    vocab = SentencePieceVocabulary(trained[0], extra_ids=100)
    with gzip.open(english / "validation.jsonl.gz", "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    assert len(texts) == 500
    decoded = vocab.decode_batch(vocab.encode_batch(texts))
    for text, back in zip(texts, decoded, strict=True):
        assert back == _normalized(vocab.processor, text)


def test_bpe_from_text_lines_and_a_task(tmp_path, shared_data):
    rows = [
        json.loads(line)
        for line in gzip.open(shared_data / "rotten_tomatoes" / "train.jsonl.gz", "rt")
    ][:3000]
    lines = tmp_path / "reviews.txt"
    lines.write_text("".join(r["text"] + "\n" for r in rows))
    from_lines = vocab_trainer.train_vocabulary(
        vocab_trainer.file_texts([str(lines)]),
        tmp_path / "lines.model",
        vocab_size=1000,
        model_type="bpe",
        progress=False,
    )
    name = "vocab_trainer_test_reviews"
    TaskRegistry.add(
        name,
        JsonLinesSource({"train": [str(shared_data / "rotten_tomatoes" / "train.jsonl.gz")]}),
        output_features={
            "targets": Feature(
                SentencePieceVocabulary(shared_data / "vocab" / "sentencepiece.model")
            )
        },
    )
    try:
        from_task = vocab_trainer.train_vocabulary(
            vocab_trainer.task_texts(name, "text"),
            tmp_path / "task.model",
            vocab_size=1000,
            model_type="bpe",
            progress=False,
        )
    finally:
        TaskRegistry.remove(name)
    assert from_lines.vocab_size == from_task.vocab_size == 1000
    assert from_task.training_sentences > from_lines.training_sentences


def test_inputs_name_their_field_after_the_last_colon(tmp_path):
    for name in ("a.jsonl", "b.jsonl", "time:12.txt"):
        (tmp_path / name).write_text("")
    assert vocab_trainer.expand_inputs(
        [f"{tmp_path}/*.jsonl:de", str(tmp_path / "time:12.txt"), str(tmp_path / "a.jsonl")],
        default_field="en",
    ) == [
        (str(tmp_path / "a.jsonl"), "de"),
        (str(tmp_path / "b.jsonl"), "de"),
        (str(tmp_path / "time:12.txt"), "en"),
        (str(tmp_path / "a.jsonl"), "en"),
    ]


def test_bad_input_gives_one_line_errors(tmp_path):
    with pytest.raises(DataError, match="no input file matches '.*nothing-here"):
        vocab_trainer.expand_inputs([str(tmp_path / "nothing-here*.txt")])
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "", "label": "a"}\n' * 20)
    with pytest.raises(DataError, match="no field 'body' \\(has: text, label\\); pass --field"):
        list(vocab_trainer.file_texts([str(rows)], "body"))
    with pytest.raises(DataError, match="the input holds no text"):
        vocab_trainer.train_vocabulary(
            vocab_trainer.file_texts([str(rows)]),
            tmp_path / "a.model",
            vocab_size=100,
            progress=False,
        )
    small = ["the cat sat on the mat"] * 50
    with pytest.raises(
        DataError,
        match="--vocab_size 8000 is too large for this data: it supports at most \\d+ pieces",
    ):
        vocab_trainer.train_vocabulary(small, tmp_path / "b.model", vocab_size=8000, progress=False)
    with pytest.raises(ConfigError, match="--model_type must be one of"):
        vocab_trainer.train_vocabulary(
            small, tmp_path / "c.model", vocab_size=10, model_type="word", progress=False
        )
