"""Records how T5 tokenises runs of one character: the ids tensorflow-text's SentencePiece op
gives through seqio 0.0.20's SentencePieceVocabulary (what T5 + SeqIO encode with), for
every vocabulary the tests tokenise with; writes tokenisation_reference.json.gz beside this file,
which tests/seqio_port/test_tokenisation_ties.py compares t5forge's encoders against.

Equal-scoring segmentations of a run ("slowwwwwwwwly": ▁slow|www|www|w or ▁slow|w|www|www)
are broken by floating-point rounding, and sentencepiece 0.2.2 and later break them otherwise
than tensorflow-text. Run in the side environment with TensorFlow, tensorflow-text and seqio
installed (never a dependency of t5forge), from the repository root:

    /tmp/side-tf/bin/python tests/seqio_port/reference/make_tokenisation_reference.py

Vocabularies: SeqIO's 26-piece test model ($T5FORGE_SHARED_DATA/vocab, /work/shared/data/vocab);
demo_spiece.model beside this file, the 4,000-piece vocabulary `t5forge demo` trains on its
bundled en_de_lohelp slice; byte_fallback_spiece.model, 1,000 pieces with byte fallback (as
`t5forge vocab train --byte_fallback` writes), for unknown characters spelled as bytes. Both
written by t5forge itself, with sentencepiece 0.2.3:

    .venv/bin/python -c "from t5forge.data.vocab_trainer import file_texts, train_vocabulary as t
    s = 't5forge/tasks/data/en_de_lohelp/train.jsonl.gz'
    texts = [*file_texts([s], 'en'), *file_texts([s], 'de')]
    t(texts, 'demo_spiece.model', vocab_size=4000)
    t(texts, 'byte_fallback_spiece.model', vocab_size=1000, byte_fallback=True)"
"""

import gzip
import json
import os
import string
import sys
from pathlib import Path

import seqio
import tensorflow as tf

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("T5FORGE_SHARED_DATA", "/work/shared/data"))
VOCABULARIES = {
    "seqio_test": SHARED / "vocab" / "sentencepiece.model",
    "demo": HERE / "demo_spiece.model",
    "byte_fallback": HERE / "byte_fallback_spiece.model",
}
CHARACTERS = [c for c in string.printable if not c.isspace()] + ["ä", "é", "€", "…", "中"]
WORDS = [
    "slowwwwwwwwly",
    "----------",
    "!!!!!!!",
    "....",
    "sooooo goooood",
    "Nooooo!!!",
    "hmmmmmm...",
    "===== Title =====",
    "ha ha hahahaha",
    "1000000000",
    "00:00:00:00:00:00",
    "=ROMAN(1999) returns MCMXCIX, IIII is not",
    "wait.... what????",
    "**bold** __init__ ~~~~ ##### xxx-xxx-xxxx",
    "Reference 1 [; Reference 2 [; … [; Reference 255]]]",
    "中 slowwwwwwwwly 中中 ---------- ééé €€€€ 0000000",
    "<extra_id_0> wwwwwwwww <extra_id_1>----------<extra_id_2>",
]


def texts() -> list[str]:
    """Every character above run 2 to 40 times, then words and sentences holding runs."""
    runs = [c * n for c in CHARACTERS for n in range(2, 41)]
    return runs + WORDS + [f"slo{'w' * n}ly and {'-' * n}" for n in range(2, 20)]


def main():
    inputs = texts()
    ids = {}
    for name, path in VOCABULARIES.items():
        vocabulary = seqio.SentencePieceVocabulary(str(path), extra_ids=100)
        ids[name] = [vocabulary.encode_tf(tf.constant(t)).numpy().tolist() for t in inputs]
    reference = {
        "made_with": {"seqio": seqio.__version__, "tensorflow": tf.__version__},
        "extra_ids": 100,
        "texts": inputs,
        "ids": ids,
    }
    path = HERE / "tokenisation_reference.json.gz"
    text = json.dumps(reference, separators=(",", ":"), ensure_ascii=False) + "\n"
    path.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    print(f"wrote {path} ({path.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
