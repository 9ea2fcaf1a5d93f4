"""Decoding speed: t5forge (jitted, KV-cached JAX) vs Hugging Face `generate` (PyTorch CPU) and
CTranslate2 (float32 and int8).

T5 1.1 small with random weights (float32), batch 8, 128-token inputs, 64 new tokens per row,
greedy and beam search with 4 beams, then the latency of one greedy request (batch 1). Every
side runs the very same weights (benchmarks/same_weights.py): transformers' from
t5forge.interop.huggingface, CTranslate2's converted from that transformers model by
ctranslate2's own TransformersConverter (with a word-level tokenizer naming each id, since the
weights are random). To make every row generate
all new tokens without adding a logits processor to any side, the EOS column of the output
projection is zeroed: an EOS logit of exactly 0 never wins against 32k random logits; the
script checks that no row emitted EOS. Each side runs in a process of its own
(benchmarks/isolated.py: sharing one process slowed CTranslate2 up to 2x and transformers ~25%);
timing is benchmarks/harness.py's (median of --runs after a warm-up that includes t5forge's
compilation), CPU-seconds are each side's own process. New tokens/s = batch * new tokens /
seconds (beams are not counted). Without ctranslate2 its column says how to install it.
t5forge also runs with its Dense kernels in bfloat16 and in int8 (`weights_dtype='bfloat16'`,
`'int8'`), in rows of its own: their tokens differ from float32's, and
benchmarks/weights_dtype_bleu.py measures what that costs in BLEU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402  (same directory)
import same_weights  # noqa: E402  (same directory)
from isolated import IsolatedSide  # noqa: E402  (same directory)

CONFIG = "t5_1_1/small"
SPECIAL_TOKENS = ("<pad>", "</s>", "<unk>")  # ids 0, 1, 2 as in T5's vocabulary
CT2_COMPUTE_TYPES = ("float32", "int8")
CT2_MISSING = "not installed (pip install -e .[bench])"
# t5forge with its Dense kernels in bfloat16 (t5forge.load(weights_dtype='bfloat16')): other
# numbers than float32's, so compared with the peers in rows of its own, as CTranslate2 int8
# is; its BLEU against float32 is benchmarks/weights_dtype_bleu.py's.
BF16_WEIGHTS = "t5forge bfloat16 weights"
# t5forge with int8 Dense kernels (weights_dtype='int8': per-channel scales, inputs quantised
# per token), the peer of CTranslate2 int8.
INT8_WEIGHTS = "t5forge int8 weights"
# bfloat16 end to end on each side (issue 36's row): t5forge's weights and activations in
# bfloat16 (load(weights_dtype='bfloat16', dtype='bfloat16')), transformers' model in bfloat16.
BF16 = "t5forge bfloat16"
HF_BF16 = "transformers bfloat16"


def token_names(vocab_size: int) -> list[str]:
    """The CTranslate2 token of each id (ct2_model's vocabulary)."""
    return [*SPECIAL_TOKENS, *(f"t{i}" for i in range(len(SPECIAL_TOKENS), vocab_size))]


def ct2_model(hf_dir: Path, vocab_size: int, ct2_dir: Path) -> Path | None:
    """CTranslate2's own conversion (TransformersConverter) of the transformers weights in
    `hf_dir` into `ct2_dir`, or None without ctranslate2. The converter reads a tokenizer too:
    it gets a word-level one naming each id (token_names), since the weights are random, in a
    staging directory beside links to hf_dir's weights, so that hf_dir is left as it was."""
    try:
        import ctranslate2
    except ImportError:
        return None
    import tokenizers
    import transformers

    transformers.utils.logging.disable_progress_bar()
    names = token_names(vocab_size)
    word_level = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({name: i for i, name in enumerate(names)}, unk_token="<unk>")
    )
    word_level.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=word_level, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    with tempfile.TemporaryDirectory(prefix="t5forge-ct2-source-") as staging:
        for path in Path(hf_dir).iterdir():
            if path.name == "config.json" or path.suffix == ".safetensors":
                (Path(staging) / path.name).symlink_to(path.resolve())
        tokenizer.save_pretrained(staging)
        ctranslate2.converters.TransformersConverter(staging).convert(str(ct2_dir))
    return ct2_dir


def _save_peers(hf_model, vocab_size: int, work_dir: Path) -> tuple[Path, Path | None]:
    """(transformers directory, CTranslate2 directory or None without ctranslate2)."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    hf_dir = work_dir / "hf"
    hf_model.save_pretrained(hf_dir)
    return hf_dir, ct2_model(hf_dir, vocab_size, work_dir / "ct2")


# Factories of the sides, each called in its own worker (benchmarks/isolated.py). The call they
# return decodes `rows` (int [B, L] input ids) and gives back int [B, new_tokens] tokens.


def forge_generate(model):
    """The call of a t5forge side on `model` (an api.Model): greedy, or beam search (alpha 0)."""

    def run(rows, new_tokens, beams):
        method = "beam" if beams > 1 else "greedy"
        return model.generate(
            rows, max_length=new_tokens, method=method, num_beams=beams, alpha=0.0
        )

    return run


def forge_side(params_path: str, weights_dtype: str = "float32", dtype: str = "float32"):
    model = same_weights.load_forge(params_path, CONFIG, dtype)
    model.set_weights_dtype(weights_dtype)
    return forge_generate(model)


def hf_side(hf_dir: str, dtype: str = "float32"):
    import torch

    model = same_weights.load_hf(hf_dir).to(getattr(torch, dtype))

    def run(rows, new_tokens, beams):
        inputs = torch.from_numpy(rows.astype(np.int64))
        with torch.no_grad():
            return model.generate(
                input_ids=inputs,
                attention_mask=torch.ones_like(inputs),
                max_new_tokens=new_tokens,
                num_beams=beams,
                do_sample=False,
                **({"length_penalty": 0.0} if beams > 1 else {}),
            ).numpy()[:, 1:]

    return run


def ct2_side(ct2_dir: str, compute_type: str, vocab_size: int):
    import ctranslate2

    translator = ctranslate2.Translator(
        ct2_dir, device="cpu", compute_type=compute_type, intra_threads=os.cpu_count()
    )
    names = token_names(vocab_size)
    ids = {name: i for i, name in enumerate(names)}

    def run(rows, new_tokens, beams):
        results = translator.translate_batch(
            [[names[i] for i in row] for row in rows],
            beam_size=beams,
            length_penalty=0.0,
            max_decoding_length=new_tokens,
        )
        return np.array([[ids[token] for token in result.hypotheses[0]] for result in results])

    return run


def _start_sides(params, hf_model, vocab_size: int, work_dir: Path) -> dict[str, IsolatedSide]:
    """{side name: its worker}, t5forge first; CTranslate2's only where it is installed."""
    params_path = same_weights.write_params(params, work_dir)
    hf_dir, ct2_dir = _save_peers(hf_model, vocab_size, work_dir)
    sides = {
        "t5forge": IsolatedSide("decode:forge_side", params_path=str(params_path)),
        BF16_WEIGHTS: IsolatedSide(
            "decode:forge_side", params_path=str(params_path), weights_dtype="bfloat16"
        ),
        INT8_WEIGHTS: IsolatedSide(
            "decode:forge_side", params_path=str(params_path), weights_dtype="int8"
        ),
        BF16: IsolatedSide(
            "decode:forge_side",
            params_path=str(params_path),
            weights_dtype="bfloat16",
            dtype="bfloat16",
        ),
        "transformers": IsolatedSide("decode:hf_side", hf_dir=str(hf_dir)),
        HF_BF16: IsolatedSide("decode:hf_side", hf_dir=str(hf_dir), dtype="bfloat16"),
    }
    for compute_type in CT2_COMPUTE_TYPES if ct2_dir else ():
        sides[f"ctranslate2 {compute_type}"] = IsolatedSide(
            "decode:ct2_side",
            ct2_dir=str(ct2_dir),
            compute_type=compute_type,
            vocab_size=vocab_size,
        )
    return sides


def _check(outputs: dict, rows: int, new_tokens: int) -> bool:
    """Every side generated all new tokens (no EOS); prints which agree with t5forge's."""
    for side, tokens in outputs.items():
        if tokens.shape != (rows, new_tokens) or (tokens == same_weights.EOS_ID).any():
            print(f"{side}: rows did not all generate {new_tokens} tokens; not comparable")
            return False
    same = {
        side: bool(np.array_equal(tokens, outputs["t5forge"]))
        for side, tokens in outputs.items()
        if side != "t5forge"
    }
    print(f"  same tokens as t5forge: {same}")
    return True


# The decoding settings a run can time (--settings): greedy and beam 4 at --batch, greedy at 1.
SETTINGS = ("greedy", "beam", "batch1")


def _settings(text: str) -> list[str]:
    """argparse type of --settings: names of SETTINGS, in the order given."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SETTINGS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown decoding setting(s) {unknown or text!r}; use a comma-separated subset "
            f"of {', '.join(SETTINGS)}"
        )
    return names


def add_shape_arguments(parser: argparse.ArgumentParser) -> None:
    """The decoding shape and repeats every decoding benchmark takes (batch 8, 128 in / 64 new)."""
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--input_length", type=int, default=128)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--runs", type=harness.repeats, default=harness.MIN_REPEATS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shape_arguments(parser)
    parser.add_argument(
        "--settings",
        default=",".join(SETTINGS),
        type=_settings,
        help=f"comma-separated subset of {', '.join(SETTINGS)} (e.g. only beam 4: --settings beam)",
    )
    parser.add_argument(
        "--blocks",
        action="store_true",
        help="time each side's runs back to back instead of in turns (harness.time_in_blocks)",
    )
    harness.add_arguments(parser, "decode")
    args = parser.parse_args()

    import jax

    from t5forge.models.model import build_model
    from t5forge.models.presets import get_config

    bench = harness.Benchmark.from_args("decode", args)
    config = get_config(CONFIG, dtype="float32")
    params = jax.device_get(build_model(config).init_params(jax.random.PRNGKey(0)))
    params = same_weights.never_eos(params)
    rng = np.random.default_rng(0)
    inputs = rng.integers(3, config.vocab_size, (args.batch, args.input_length), dtype=np.int32)
    with tempfile.TemporaryDirectory(prefix="t5forge-bench-decode-") as scratch:
        sides = _start_sides(
            params, same_weights.hf_model(config, params), config.vocab_size, Path(scratch)
        )
        try:
            status = _measure(bench, args, sides, inputs)
        finally:
            for side in sides.values():
                side.close()
    if status == 0:
        bench.finish()
    return status


def _measure(bench, args, sides: dict[str, IsolatedSide], inputs: np.ndarray) -> int:
    print(
        f"T5 1.1 small fp32, inputs {args.input_length}, {args.new_tokens} new tokens, each "
        f"side in its own process ({os.cpu_count()} threads), ctranslate2 "
        f"{'float32 + int8' if 'ctranslate2 int8' in sides else CT2_MISSING}",
        flush=True,
    )
    shape = f"{args.input_length} in / {args.new_tokens} new"
    settings = {
        "greedy": (
            "greedy",
            f"greedy decode, batch {args.batch}, {shape}",
            inputs,
            1,
            "throughput",
        ),
        "beam": ("beam 4", f"beam 4 decode, batch {args.batch}, {shape}", inputs, 4, "throughput"),
        "batch1": ("batch-1 greedy", f"batch-1 greedy latency, {shape}", inputs[:1], 1, "latency"),
    }
    for prefix, row, rows, beams, metric in (settings[name] for name in args.settings):
        print(row, flush=True)
        calls = {
            f"{prefix}: {name}": side.bind(rows=rows, new_tokens=args.new_tokens, beams=beams)
            for name, side in sides.items()
        }
        outputs = bench.run(
            calls,
            args.runs,
            work=len(rows) * args.new_tokens,
            unit="new tokens/s",
            blocks=args.blocks,
        )
        if not _check(
            {side.split(": ")[1]: out for side, out in outputs.items()}, len(rows), args.new_tokens
        ):
            return 1
        for ours, ours_row in (
            ("t5forge", row),
            (BF16_WEIGHTS, f"{row}, {BF16_WEIGHTS}"),
            (INT8_WEIGHTS, f"{row}, {INT8_WEIGHTS}"),
            (BF16, f"{row}, {BF16}"),
        ):
            peers = ("transformers", *(f"ctranslate2 {kind}" for kind in CT2_COMPUTE_TYPES))
            if ours == BF16:
                peers = (HF_BF16, *peers[1:])
            for peer in peers:
                if f"{prefix}: {peer}" in bench.sides:
                    bench.compare(ours_row, f"{prefix}: {ours}", f"{prefix}: {peer}", metric, peer)
                else:
                    bench.peer_missing(ours_row, f"{prefix}: {ours}", peer, CT2_MISSING)
    return 0


if __name__ == "__main__":
    sys.exit(main())
