"""`t5forge convert`: move a model between checkpoint formats.

    t5forge convert --from t5x --to hf --input ckpt --output hf_dir --gin_file=models/t5_1_1/base.gin
    t5forge convert --from hf --to t5forge --input hf_dir --output model_dir

Every tensor mapped is listed in the summary, so a user can see nothing was dropped.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import jax
import numpy as np

from t5forge.errors import ConfigError

HELP = "convert checkpoints: --from {hf,t5x,mesh_tf,t5forge} --to {t5forge,hf}"
SOURCES = ("hf", "t5x", "mesh_tf", "t5forge")
TARGETS = ("t5forge", "hf")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t5forge convert", description=HELP)
    parser.add_argument("--from", dest="source", required=True, choices=SOURCES)
    parser.add_argument("--to", dest="target", required=True, choices=TARGETS)
    parser.add_argument("--input", required=True, help="checkpoint file or directory to read")
    parser.add_argument("--output", required=True, help="directory to write")
    parser.add_argument(
        "--gin_file",
        action="append",
        default=[],
        help="model gin file (T5Config.*) for checkpoints that carry no config",
    )
    parser.add_argument("--config", help="preset name instead of a gin file, e.g. t5_1_1/base")
    parser.add_argument("--vocab", help="SentencePiece model to ship with the output")
    parser.add_argument(
        "--extra_ids",
        type=int,
        default=100,
        help="extra ids of --vocab (sentinels appended as SeqIO does)",
    )
    return parser


def _config(args, params):
    from t5forge.api import _resolve_config

    if args.config:
        return _resolve_config(args.config)
    if args.gin_file:
        from t5forge.cli.gin_flags import resolve_gin_file

        return _resolve_config(resolve_gin_file(args.gin_file[0], []))
    if params is not None:
        from t5forge.interop.t5x import infer_config

        return infer_config(params)
    return None


def _read(args):
    """(config, params, vocab_path) from the input in its format."""
    from t5forge.interop import formats

    source = Path(args.input)
    if not source.exists():
        raise ConfigError(f"--input {source} does not exist")
    detected = formats.detect_format(source)
    if detected not in (None, args.source):
        raise ConfigError(
            f"--input {source} is a {detected} checkpoint, not {args.source}; "
            f"pass --from {detected}"
        )
    if args.source in (formats.HF, formats.T5FORGE):
        import t5forge

        model = t5forge.load(
            source, config=args.config or (args.gin_file[0] if args.gin_file else None)
        )
        vocab = getattr(model.vocabulary, "path", None)
        if vocab:
            args.extra_ids = model.vocabulary.extra_ids
        return model.config, model.params, vocab
    params = formats.read_params(source, args.source)
    return _config(args, params), params, None


def _write_t5forge(config, params, output: Path, vocab, extra_ids: int) -> None:
    from t5forge.training.checkpoints import Checkpointer

    metadata = {"model_config": dataclasses.asdict(config), "converted": True}
    if vocab:
        import shutil

        shutil.copyfile(vocab, output / "spiece.model")
        metadata["vocabulary"] = {"path": "spiece.model", "extra_ids": extra_ids}
    checkpointer = Checkpointer(output, async_save=False)
    checkpointer.save(
        0, {"params": jax.tree.map(np.asarray, params)}, metadata=metadata, force=True
    )
    checkpointer.close()


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from tqdm import tqdm

    with tqdm(total=3, desc="convert", unit="stage", disable=None) as bar:
        bar.set_postfix_str(f"reading {args.source}")
        config, params, vocab = _read(args)
        bar.update()
        output = _check_and_write(args, config, params, vocab, bar)
    _print_summary(args, params, output)
    return 0


def _check_and_write(args, config, params, vocab, bar) -> Path:
    from t5forge.models.model import build_model

    if config is None:
        raise ConfigError("this checkpoint records no model config; pass --gin_file or --config")
    bar.set_postfix_str("checking shapes")
    build_model(config).check_params_match(params)
    bar.update()
    vocab = args.vocab or vocab
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    bar.set_postfix_str(f"writing {args.target}")
    if args.target == "hf":
        from t5forge.interop.huggingface import save_hf_dir

        save_hf_dir(
            params, config, output, vocab_path=vocab, extra_ids=args.extra_ids if vocab else 0
        )
    else:
        _write_t5forge(config, params, output, vocab, args.extra_ids)
    bar.update()
    return output


def _print_summary(args, params, output: Path) -> None:
    from t5forge.models.param_names import named_leaves

    tensors = named_leaves(params)
    total = 0
    for name, leaf in tensors.items():
        total += int(np.prod(np.shape(leaf)))
        print(f"  {name:<70} {tuple(np.shape(leaf))}")
    print(
        f"converted {len(tensors)} tensors ({total:,} parameters) from {args.source} "
        f"{args.input} to {args.target} {output}"
    )
