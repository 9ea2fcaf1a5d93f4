"""`t5forge vocab train ...`: a T5-layout SentencePiece vocabulary from files or a task.

Prints a summary (size, character coverage, pieces per word on held-out text) so a user can
judge the vocabulary before spending compute on a model that uses it.
"""

from __future__ import annotations

import argparse

from t5forge.cli.commands import COMMANDS
from t5forge.data import vocab_trainer
from t5forge.errors import ConfigError
from t5forge.run.task_modules import import_task_modules

HELP = COMMANDS["vocab"].summary


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t5forge vocab", description=HELP)
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser(
        "train",
        help="train a vocabulary",
        description="Train a SentencePiece model; extra ids are appended at load time "
        "(SentencePieceVocabulary(path, extra_ids)), not stored in the file. Each --input may "
        "name the JSON field its files hold, e.g. --input en.jsonl.gz:text --input "
        "'pairs/*.jsonl.gz':de for one vocabulary over two languages.",
    )
    source = train.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--input",
        nargs="+",
        action="extend",
        metavar="PATH[:FIELD]",
        help="text files (one sentence per line) or JSONL(.gz) files; PATH may "
        "be a glob, FIELD the JSON field to read from it (default: --field); "
        "repeatable",
    )
    source.add_argument(
        "--task",
        metavar="NAME",
        help="a registered task (built-in or from --module_import): read its raw source",
    )
    train.add_argument(
        "--field",
        default="text",
        help="JSON/task field to read where an --input names none (default: text)",
    )
    train.add_argument(
        "--module_import",
        action="append",
        default=[],
        metavar="MODULE",
        help="module that registers the --task (repeatable)",
    )
    train.add_argument("--split", default="train", help="task split to read (default: train)")
    train.add_argument("--vocab_size", type=int, required=True, help="pieces in the model")
    train.add_argument(
        "--extra_ids",
        type=int,
        default=100,
        help="sentinels the model will be loaded with (default: 100)",
    )
    train.add_argument("--model_type", choices=vocab_trainer.MODEL_TYPES, default="unigram")
    train.add_argument(
        "--byte_fallback",
        action="store_true",
        help="spell unknown characters as UTF-8 byte pieces (lossless)",
    )
    train.add_argument(
        "--input_sentence_size",
        type=int,
        default=0,
        help="sample this many sentences for training (0: use all)",
    )
    train.add_argument(
        "--whole_words",
        default="",
        help="comma-separated words kept as one piece each, e.g. a classifier's "
        "labels (fresh,rotten), so each label is one token",
    )
    train.add_argument("--output", required=True, help="where to write the .model file")
    train.add_argument("--no_progress", action="store_true", help="hide the progress bar")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.output.endswith("/"):
        raise ConfigError(f"--output {args.output!r} is a directory; name the .model file")
    if args.task:
        import_task_modules(args.module_import)
        texts = vocab_trainer.task_texts(args.task, args.field, args.split)
    else:
        texts = vocab_trainer.input_texts(vocab_trainer.expand_inputs(args.input, args.field))
    summary = vocab_trainer.train_vocabulary(
        texts,
        args.output,
        vocab_size=args.vocab_size,
        extra_ids=args.extra_ids,
        model_type=args.model_type,
        byte_fallback=args.byte_fallback,
        input_sentence_size=args.input_sentence_size,
        progress=not args.no_progress,
        whole_words=[word.strip() for word in args.whole_words.split(",") if word.strip()],
    )
    print(summary.format())
    return 0
