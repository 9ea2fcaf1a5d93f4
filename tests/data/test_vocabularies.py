"""Vocabularies: seqio's golden ids, the reversed extra-id layout, decoding rules, errors."""

import pickle

import pytest

from t5forge.data import ByteVocabulary, EnvironmentSentencePieceVocabulary, SentencePieceVocabulary
from t5forge.errors import DataError


def test_sentencepiece_golden_ids(test_spm_path):
    vocab = SentencePieceVocabulary(test_spm_path)
    assert vocab.vocab_size == 26
    assert (vocab.pad_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2)
    assert vocab.encode("this is a test") == [11, 8, 6, 3, 8, 6, 3, 5, 10]
    assert vocab.decode([11, 8, 6, 3, 8, 6, 3, 5, 10]) == "this is a test"


def test_extra_ids_are_appended_in_reverse(test_spm_path):
    vocab = SentencePieceVocabulary(test_spm_path, extra_ids=10)
    assert vocab.vocab_size == 36
    text = "<extra_id_0> <extra_id_1> v <extra_id_9>"
    assert vocab.encode(text) == [35, 34, 3, 25, 26]
    assert vocab.decode([35, 34, 3, 25, 26]) == text
    assert vocab.id_to_piece(35) == "▁<extra_id_0>"


def test_decode_stops_at_eos_and_maps_out_of_range_to_unk(test_spm_path):
    vocab = SentencePieceVocabulary(test_spm_path)
    assert vocab.decode([11, 8, 6, 1, 5, 10]) == "this"
    assert vocab.decode([11, 8, 6, 999]) == vocab.decode([11, 8, 6, 2])
    assert vocab.decode([0, 11, 8, 6, 0]) == "this"  # padding is invisible


def test_batch_calls_match_single_calls(test_spm_path):
    vocab = SentencePieceVocabulary(test_spm_path, extra_ids=5)
    texts = ["this is a test", "a cat sat", "<extra_id_3> test"]
    batch = vocab.encode_batch(texts, num_threads=2)
    assert batch == [vocab.encode(t) for t in texts]
    assert vocab.decode_batch(batch + [[11, 1, 5]]) == [vocab.decode(b) for b in batch] + ["th"]


def test_vocabulary_pickles_without_native_state(test_spm_path):
    vocab = SentencePieceVocabulary(test_spm_path, extra_ids=3)
    clone = pickle.loads(pickle.dumps(vocab))
    assert clone == vocab and clone.encode("this is") == vocab.encode("this is")
    assert len(pickle.dumps(vocab)) < 1000  # the model bytes are not shipped to workers


def test_byte_vocabulary_layout():
    vocab = ByteVocabulary()
    assert vocab.vocab_size == 259
    assert vocab.encode("hi é") == [107, 108, 35, 198, 172]
    assert vocab.decode([107, 108, 1, 107]) == "hi"
    assert vocab.decode([107, 300, 108]) == "hi"  # out of range -> UNK, which decodes to nothing
    assert ByteVocabulary(extra_ids=100).vocab_size == 359
    assert ByteVocabulary(extra_ids=100).id_to_piece(358) == "<extra_id_0>"


def test_non_sentencepiece_file_is_one_line_error(tmp_path, shared_data):
    not_a_model = shared_data / "vocab" / "README.md"
    with pytest.raises(DataError, match=r"README.md is not a SentencePiece model") as e:
        SentencePieceVocabulary(not_a_model)
    assert "\n" not in str(e.value)
    with pytest.raises(DataError, match=r"cannot read vocabulary file .*missing.model"):
        SentencePieceVocabulary(tmp_path / "missing.model")


def test_environment_vocabulary_is_read_on_first_use(monkeypatch, test_spm_path):
    vocab = EnvironmentSentencePieceVocabulary(extra_ids=10)
    monkeypatch.delenv("T5FORGE_VOCAB", raising=False)
    with pytest.raises(DataError, match=r"set T5FORGE_VOCAB=.*t5forge vocab train"):
        vocab.encode("this")
    monkeypatch.setenv("T5FORGE_VOCAB", str(test_spm_path))
    assert vocab.vocab_size == 36
    assert pickle.loads(pickle.dumps(vocab)).encode("<extra_id_0>") == [35]


def test_environment_vocabulary_follows_the_variable(monkeypatch, test_spm_path, tiny_vocab):
    """Pointed elsewhere after a first use (`tasks preview --vocab` after a run in the same
    process), the variable's new model is read, not the one read first."""
    vocab = EnvironmentSentencePieceVocabulary(extra_ids=10)
    monkeypatch.setenv("T5FORGE_VOCAB", str(tiny_vocab))
    first = vocab.vocab_size
    monkeypatch.setenv("T5FORGE_VOCAB", str(test_spm_path))
    assert vocab.vocab_size == 36 != first
    assert vocab.encode("<extra_id_0>") == [35]
