"""`t5forge convert`: move a model between checkpoint formats.

    t5forge convert --from t5x --to hf --input ckpt --output hf_dir --gin_file=models/t5_1_1/base.gin
    t5forge convert --from hf --to t5forge --input hf_dir --output model_dir
    t5forge convert --from hf --to t5forge --input google/t5-v1_1-small --output model_dir
    t5forge convert --from t5forge --to t5x --input run/checkpoint_5000 --output t5x_dir

Every tensor mapped is listed in the summary, so a user can see nothing was dropped.
"""

from __future__ import annotations

import argparse

import numpy as np

from t5forge.cli.commands import COMMANDS
from t5forge.gin_config.gin_flags import resolve_gin_file
from t5forge.run.convert import SOURCES, TARGETS, convert

HELP = COMMANDS["convert"].summary


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t5forge convert", description=HELP)
    parser.add_argument("--from", dest="source", required=True, choices=SOURCES)
    parser.add_argument("--to", dest="target", required=True, choices=TARGETS)
    parser.add_argument(
        "--input",
        required=True,
        help="checkpoint file or directory to read; with --from hf also a hub id, org/name[@revision]",
    )
    parser.add_argument(
        "--output",
        required=True,
        help="directory to write (for --to t5x, the model directory: checkpoint_<step> goes in it)",
    )
    parser.add_argument(
        "--gin_file",
        action="append",
        default=[],
        help="model gin file (T5Config.*) for checkpoints that carry no config",
    )
    parser.add_argument("--config", help="preset name instead of a gin file, e.g. t5_1_1/base")
    parser.add_argument(
        "--vocab", help="SentencePiece model to ship with the output (not with --to t5x)"
    )
    parser.add_argument(
        "--extra_ids",
        type=int,
        default=100,
        help="extra ids of --vocab (sentinels appended as SeqIO does)",
    )
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    converted = convert(
        args.input,
        args.output,
        from_=args.source,
        to=args.target,
        config=args.config or (resolve_gin_file(args.gin_file[0], []) if args.gin_file else None),
        vocab=args.vocab,
        extra_ids=args.extra_ids,
    )
    total = 0
    for name, shape in converted.tensors.items():
        total += int(np.prod(shape))
        print(f"  {name:<70} {shape}")
    print(
        f"converted {len(converted.tensors)} tensors ({total:,} parameters) from "
        f"{args.source} {args.input} to {args.target} {converted.path}"
    )
    return 0
