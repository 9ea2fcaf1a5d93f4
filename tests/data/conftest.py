"""Fixtures shared by the data tests: test vocabularies, English documents, the sentiment task."""

import gzip
import io
import itertools
import json

import pytest
import sentencepiece

from t5forge.data import SentencePieceVocabulary
from t5forge.tasks.builtin import classification_task

NUM_DOCUMENTS = 2000
EXTRA_IDS = 100


@pytest.fixture(scope="session")
def spm_vocabulary(test_spm_path):
    """seqio's test SentencePiece model with 10 sentinels, as the built-in tasks add them."""
    return SentencePieceVocabulary(test_spm_path, extra_ids=10)


@pytest.fixture(scope="session")
def make_sentiment_task(shared_data):
    """Builds the rotten_tomatoes classification task; each test module names its own copy."""

    def make(name, vocabulary):
        return classification_task(
            name, shared_data, "rotten_tomatoes", "text", "label", "sentiment", vocabulary
        )

    return make


@pytest.fixture(scope="session")
def english_documents(shared_data):
    """The first documents of the English pretraining corpus."""
    with gzip.open(shared_data / "english_corpus" / "train.jsonl.gz", "rt") as f:
        return [json.loads(line)["text"] for line in itertools.islice(f, NUM_DOCUMENTS)]


@pytest.fixture(scope="session")
def english_vocab(english_documents, tmp_path_factory):
    """A 2000-piece SentencePiece model of those documents, with 100 sentinels."""
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(english_documents[:400]),
        model_writer=model,
        vocab_size=2000,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        num_threads=2,
        minloglevel=2,
        max_sentence_length=20000,
    )
    path = tmp_path_factory.mktemp("vocab") / "english.model"
    path.write_bytes(model.getvalue())
    return SentencePieceVocabulary(path, extra_ids=EXTRA_IDS)
