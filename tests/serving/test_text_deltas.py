"""Streamed text deltas, decoded from a short window per token, add up to the decoding of
every token so far: real German and English sentences, a real T5 vocabulary and the tests'
tiny one (words it lacks fall back to pieces or unknowns)."""

from pathlib import Path

import pytest

from t5forge.data.vocab_trainer import file_texts
from t5forge.data.vocabularies import SentencePieceVocabulary
from t5forge.serving.streaming import TextDeltas

ROOT = Path(__file__).resolve().parents[2]
EN_DE = ROOT / "t5forge" / "tasks" / "data" / "en_de_lohelp" / "train.jsonl.gz"
T5_VOCAB = ROOT / ".." / "shared" / "data" / "vocab" / "sentencepiece.model"


@pytest.mark.parametrize("which", ["t5", "tiny"])
def test_deltas_add_up_to_the_whole_decoding_at_every_token(which, tiny_vocab):
    vocabulary = SentencePieceVocabulary(str(T5_VOCAB if which == "t5" else tiny_vocab))
    texts = [t for i, t in enumerate(file_texts([str(EN_DE)], "de")) if i < 40]
    texts += [t for i, t in enumerate(file_texts([str(EN_DE)], "en")) if i < 40]
    texts.append("Größe: 5 € — naïve café, 東京 ✓ and  two  spaces")
    for text in texts:
        tokens = vocabulary.encode(text)
        deltas = TextDeltas(vocabulary)
        streamed = ""
        for end, token in enumerate(tokens, start=1):
            streamed += deltas.add(token)
            whole = vocabulary.decode(tokens[:end])
            assert whole.startswith(streamed), (text, end)
            if not whole.endswith("\ufffd"):
                assert streamed == whole, (text, end)
