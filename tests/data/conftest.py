"""Fixtures shared by the data tests: the usual test vocabulary and the sentiment task."""

import pytest

from t5forge.data.vocabularies import SentencePieceVocabulary
from t5forge.tasks.builtin import classification_task


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
