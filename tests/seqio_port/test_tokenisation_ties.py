"""t5forge tokenises runs of one character or string as T5 does: the ids tensorflow-text gives
through seqio 0.0.20 (reference/tokenisation_reference.json.gz, recorded in a side environment
by make_tokenisation_reference.py beside it), for SeqIO's test vocabulary, the 4,000-piece
vocabulary `t5forge demo` trains and one with byte fallback. sentencepiece 0.2.3 alone breaks
39 of the demo's ties and 45 of the byte-fallback one's the other way ("slowwwwwwwwly":
▁slow|w|www|www where T5 has ▁slow|www|www|w)."""

import gzip
import json
from pathlib import Path

import pytest

from t5forge.data import SentencePieceVocabulary

REFERENCE_DIR = Path(__file__).resolve().parent / "reference"
REFERENCE = json.loads(
    gzip.decompress((REFERENCE_DIR / "tokenisation_reference.json.gz").read_bytes())
)


@pytest.fixture(params=sorted(REFERENCE["ids"]))
def vocabulary_and_ids(request, test_spm_path):
    path = test_spm_path if request.param == "seqio_test" else None
    path = path or REFERENCE_DIR / f"{request.param}_spiece.model"
    vocabulary = SentencePieceVocabulary(path, extra_ids=REFERENCE["extra_ids"])
    return vocabulary, REFERENCE["ids"][request.param]


def test_each_text_encodes_as_t5(vocabulary_and_ids):
    vocabulary, expected = vocabulary_and_ids
    assert [vocabulary.encode(text) for text in REFERENCE["texts"]] == expected


def test_batches_encode_as_t5(vocabulary_and_ids):
    vocabulary, expected = vocabulary_and_ids
    assert vocabulary.encode_batch(REFERENCE["texts"]) == expected
    arrays = vocabulary.encode_arrays(REFERENCE["texts"])
    assert [ids.tolist() for ids in arrays] == expected
    assert {ids.dtype.name for ids in arrays} == {"int32"}


def test_the_demo_reference_holds_ties():
    """Runs T5 splits into pieces of different lengths, which score the same in any order."""
    vocabulary = SentencePieceVocabulary(REFERENCE_DIR / "demo_spiece.model")
    mixed_runs = [
        text
        for text, ids in zip(REFERENCE["texts"], REFERENCE["ids"]["demo"])
        if len(set(text)) == 1
        and len({vocabulary.id_to_piece(i).lstrip("▁") for i in ids} - {""}) > 1
    ]
    assert len(mixed_runs) > 100
