"""Trains the English+German vocabulary of the en->de fine-tuning example.

The model is pretrained on English text but fine-tuned to write German, so the vocabulary
is trained on both: the English corpus (`text`) and the German side (`de`) of en_de_lohelp's
train split. A vocabulary trained on English alone would spell German words in many short
pieces, and the fine-tuned model would have to learn German spelling piece by piece.

    .venv/bin/python examples/finetune_en_de/train_vocab.py --output runs/en_de/spiece.model
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

from t5forge.data.vocab_trainer import file_texts, train_vocabulary
from t5forge.tasks.builtin import default_data_dir


def english_and_german_texts(data_dir: Path):
    """English corpus paragraphs, then the German sentences of the translation train split."""
    return itertools.chain(
        file_texts([str(data_dir / "english_corpus" / "train.jsonl.gz")], "text"),
        file_texts([str(data_dir / "en_de_lohelp" / "train.jsonl.gz")], "de"),
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, help="where to write the .model file")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--input_sentence_size", type=int, default=0,
                        help="sample this many paragraphs (0: use all)")
    parser.add_argument("--data_dir", type=Path, default=None,
                        help="folder with english_corpus/ and en_de_lohelp/ "
                             "(default: $T5FORGE_DATA_DIR, else ../shared/data)")
    args = parser.parse_args(argv)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    summary = train_vocabulary(
        english_and_german_texts(args.data_dir or default_data_dir()), args.output,
        vocab_size=args.vocab_size, extra_ids=100,
        input_sentence_size=args.input_sentence_size,
    )
    print(summary.format())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
