"""What breaking tokenisation ties as T5 does costs: encode_arrays against sentencepiece alone.

sentencepiece 0.2.3 breaks ties between equal-scoring segmentations of repeated strings
otherwise than T5's tensorflow-text; t5forge finds the encodings that may hold one and
re-segments those (t5forge/data/sentencepiece_ties.py). This times, on the first --texts
sentences of en_de_lohelp (English and German halves) and paragraphs of english_corpus
(../shared/data, or --data_dir), `SentencePieceVocabulary.encode_arrays` (one thread)
against the same native call without the tie pass, through benchmarks/harness.py, with the
vocabulary `t5forge demo` trains (tests/seqio_port/reference/demo_spiece.model) or
--vocabulary.

Results go to benchmarks/results/tokenisation_ties.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402  (same directory)

from t5forge.data import SentencePieceVocabulary  # noqa: E402

DEMO_VOCABULARY = harness.REPO / "tests" / "seqio_port" / "reference" / "demo_spiece.model"


def _rows(path: Path):
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        yield from map(json.loads, lines)


def corpora(data_dir: Path, count: int) -> dict[str, list[str]]:
    pairs = list(_rows(data_dir / "en_de_lohelp" / "train.jsonl.gz"))[: count // 2]
    paragraphs = []
    for row in _rows(data_dir / "english_corpus" / "train.jsonl.gz"):
        paragraphs += [p for p in row["text"].split("\n") if p]
        if len(paragraphs) >= count:
            break
    return {
        "en_de_lohelp sentences": [p["en"] for p in pairs] + [p["de"] for p in pairs],
        "english_corpus paragraphs": paragraphs[:count],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--vocabulary", type=Path, default=DEMO_VOCABULARY)
    parser.add_argument("--data_dir", type=Path, default=harness.REPO.parent / "shared" / "data")
    parser.add_argument("--texts", type=int, default=10_000)
    parser.add_argument(
        "--runs", type=harness.repeats, default=harness.MIN_REPEATS, help="timed repetitions"
    )
    harness.add_arguments(parser, "tokenisation_ties")
    args = parser.parse_args()
    bench = harness.Benchmark.from_args("tokenisation_ties", args)
    vocabulary = SentencePieceVocabulary(args.vocabulary, extra_ids=100)
    processor = vocabulary.processor
    for corpus, texts in corpora(args.data_dir, args.texts).items():

        def alone(texts=texts):
            arrays = processor.encode(texts, out_type="numpy", num_threads=1)
            return [np.array(ids) for ids in arrays]

        outputs = bench.run(
            {
                f"{corpus}: sentencepiece alone": alone,
                f"{corpus}: with T5's tie order": lambda texts=texts: vocabulary.encode_arrays(
                    texts, num_threads=1
                ),
            },
            args.runs,
            len(texts),
            "texts/s",
        )
        changed = sum(not np.array_equal(a, b) for a, b in zip(*outputs.values(), strict=True))
        print(f"  {corpus}: {changed} of {len(texts)} encodings changed to T5's", flush=True)
        bench.compare(
            f"{corpus}: with the tie pass vs without",
            f"{corpus}: with T5's tie order",
            f"{corpus}: sentencepiece alone",
        )
    bench.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
