"""What narrower inference costs in quality: BLEU of one checkpoint in float32, bfloat16 and int8,
beside CTranslate2 int8 on the same weights.

Each t5forge row loads the checkpoint with its own `t5forge.load(dtype=..., weights_dtype=...)`
(docs/inference-dtypes.md): float32; bfloat16 weights with float32 activations; bfloat16
weights and activations; int8 kernels (per-channel scales, inputs quantised per token) with
float32 and with bfloat16 activations. CTranslate2's row converts the same weights
(Model.save_hf, then benchmarks/decode.py's ct2_model) and runs compute_type int8. Every side
translates the bundled English->German validation split (400 sentences, the split `make demo`
evaluates) greedily from the same input tokens (t5forge's SentencePiece encoding, cut as the
run's evaluation cut them), and prints corpus BLEU (t5forge.data.metrics.bleu, T5's sacrebleu
settings), how many translations equal float32's, and greedy new tokens/s (tokens up to and
including EOS, over the wall time after a compiling warm-up batch). The issue's bar: BLEU
within 0.5 of float32 on the demo checkpoint.

    .venv/bin/t5forge demo --model_dir runs/demo       # the checkpoint, ~10 min on 2 cores
    .venv/bin/python benchmarks/weights_dtype_bleu.py --model_dir runs/demo
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import t5forge  # noqa: E402  (before jax starts its threads: t5forge.host_memory)
from t5forge.data.metrics import bleu  # noqa: E402
from t5forge.data.vocabularies import EOS_ID  # noqa: E402
from t5forge.tasks.builtin import BUNDLED_DATA_DIR  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decode  # noqa: E402  (same directory: CTranslate2's conversion)

VALIDATION = BUNDLED_DATA_DIR / "en_de_lohelp" / "validation.jsonl.gz"
# Row name -> t5forge.load's dtype options; float32 first, the reference.
SETTINGS = {
    "float32": {"dtype": "float32"},
    "bfloat16 weights": {"dtype": "float32", "weights_dtype": "bfloat16"},
    "bfloat16": {"dtype": "bfloat16", "weights_dtype": "bfloat16"},
    "int8": {"dtype": "float32", "weights_dtype": "int8"},
    "int8, bfloat16 activations": {"dtype": "bfloat16", "weights_dtype": "int8"},
}
CT2_INT8 = "ctranslate2 int8"


def tokens_until_eos(row) -> list[int]:
    """A generated row's tokens before EOS (decoding pads after it)."""
    row = list(row)
    return row[: row.index(EOS_ID)] if EOS_ID in row else row


def forge_translations(model_dir, options, rows, max_length, batch):
    """(token rows without EOS, new tokens/s) of t5forge loaded with `options`."""
    model = t5forge.load(model_dir, **options)
    model.generate(rows[:batch], max_length=max_length)  # compiles
    start = time.perf_counter()
    outputs = [
        tokens_until_eos(row)
        for first in range(0, len(rows), batch)
        for row in model.generate(rows[first : first + batch], max_length=max_length).tolist()
    ]
    return outputs, _tokens_per_second(outputs, max_length, time.perf_counter() - start)


def ct2_translations(model_dir, rows, max_length, batch, scratch: Path):
    """(token rows without EOS, new tokens/s) of CTranslate2 int8 on the same weights, or None
    without ctranslate2."""
    model = t5forge.load(model_dir, dtype="float32")
    model.save_hf(scratch / "hf")
    vocab_size = model.config.vocab_size
    ct2_dir = decode.ct2_model(scratch / "hf", vocab_size, scratch / "ct2")
    if ct2_dir is None:
        return None
    import ctranslate2

    translator = ctranslate2.Translator(
        str(ct2_dir), device="cpu", compute_type="int8", intra_threads=os.cpu_count()
    )
    names = decode.token_names(vocab_size)
    ids = {name: i for i, name in enumerate(names)}

    def translate(chunk):
        results = translator.translate_batch(
            [[names[i] for i in row] for row in chunk],
            beam_size=1,
            max_decoding_length=max_length,
        )
        return [[ids[token] for token in result.hypotheses[0]] for result in results]

    translate(rows[:batch])  # warm-up, as t5forge's compiling batch
    start = time.perf_counter()
    outputs = [
        row
        for first in range(0, len(rows), batch)
        for row in translate(rows[first : first + batch])
    ]
    return outputs, _tokens_per_second(outputs, max_length, time.perf_counter() - start)


def _tokens_per_second(outputs, max_length: int, seconds: float) -> float:
    """New tokens (each row's EOS counted when it came before max_length) per second."""
    made = sum(len(row) + (len(row) < max_length) for row in outputs)
    return made / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", default="runs/demo", help="a t5forge checkpoint")
    parser.add_argument("--max_length", type=int, default=64, help="the demo's target length")
    parser.add_argument("--batch", type=int, default=100, help="the demo's eval batch")
    parser.add_argument(
        "--limit", type=int, default=0, help="translate only the first N sentences (smoke runs)"
    )
    parser.add_argument(
        "--settings",
        nargs="+",
        choices=[*SETTINGS, CT2_INT8],
        default=[*SETTINGS, CT2_INT8],
        help="the rows to run (float32 always runs: the others are compared with it)",
    )
    args = parser.parse_args()

    lines = gzip.open(VALIDATION, "rt").readlines()[: args.limit or None]
    examples = [json.loads(line) for line in lines]
    targets = [example["de"] for example in examples]
    reference = t5forge.load(args.model_dir, dtype="float32")
    reference.input_length_policy = "truncate"  # as the run's evaluation cut inputs
    texts = [f"translate English to German: {example['en']}" for example in examples]
    rows = reference.encode(texts).rows
    batch = min(args.batch, len(rows))
    outputs = {}
    for name in ["float32", *(name for name in args.settings if name in SETTINGS)]:
        if name not in outputs:
            outputs[name] = forge_translations(
                args.model_dir, SETTINGS[name], rows, args.max_length, batch
            )
    if CT2_INT8 in args.settings:
        with tempfile.TemporaryDirectory(prefix="t5forge-bleu-ct2-") as scratch:
            peer = ct2_translations(args.model_dir, rows, args.max_length, batch, Path(scratch))
        if peer is None:
            print(f"{CT2_INT8}: {decode.CT2_MISSING}")
        else:
            outputs[CT2_INT8] = peer

    print(
        f"{args.model_dir}: {len(rows)} validation sentences, greedy, max_length "
        f"{args.max_length}, batch {batch}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    print(f"  {'side':28s} {'BLEU':>6s} {'vs fp32':>8s} {'same as fp32':>13s} {'tokens/s':>9s}")
    exact = outputs["float32"][0]
    for name, (tokens, speed) in outputs.items():
        texts = [reference.vocabulary.decode(row) for row in tokens]
        score = bleu(targets, texts)["bleu"]
        if name == "float32":
            baseline = score
        same = sum(np.array_equal(a, b) for a, b in zip(tokens, exact))
        print(
            f"  {name:28s} {score:6.2f} {score - baseline:+8.2f} "
            f"{f'{same}/{len(rows)}':>13s} {speed:9.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
