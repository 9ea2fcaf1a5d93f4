"""The tie pass touches unigram models only: BPE merges pieces in a fixed order and has no
equal-scoring segmentations to break, so its encodings stay sentencepiece's."""

from t5forge.data import SentencePieceVocabulary
from t5forge.data.sentencepiece_ties import T5TieOrder
from t5forge.data.vocab_trainer import file_texts, train_vocabulary

RUNS = ["slowwwwwwwwly", "----------", "0000000", "00:00:00:00:00", "hmmmmmm...."]


def test_a_bpe_vocabulary_keeps_sentencepiece_s_encodings(shared_data, tmp_path):
    source = str(shared_data / "en_de_lohelp" / "validation.jsonl.gz")
    path = tmp_path / "bpe.model"
    train_vocabulary(
        file_texts([source], "en"), path, vocab_size=500, model_type="bpe", progress=False
    )
    vocabulary = SentencePieceVocabulary(path, extra_ids=100)
    assert not T5TieOrder(vocabulary.processor).applies
    assert vocabulary.encode_batch(RUNS) == vocabulary.processor.encode(RUNS)
