"""What bfloat16 weights cost in quality: BLEU of one checkpoint with float32 and bfloat16 weights.

`t5forge.load(..., weights_dtype='bfloat16')` stores every Dense kernel in bfloat16 and
multiplies in it (faster decoding on CPUs with AVX-512 BF16, docs/performance.md). This
translates the bundled English->German validation split (400 sentences, the split `make demo`
evaluates) with both, greedy, and prints corpus BLEU (t5forge.data.metrics.bleu, T5's sacrebleu
settings), how many translations are identical, and each side's wall time. The issue's bar:
BLEU within 0.5 of float32 on the demo checkpoint.

    .venv/bin/t5forge demo --model_dir runs/demo       # the checkpoint, ~10 min on 2 cores
    .venv/bin/python benchmarks/weights_dtype_bleu.py --model_dir runs/demo
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import t5forge  # noqa: E402  (before jax starts its threads: t5forge.host_memory)
from t5forge.data.metrics import bleu  # noqa: E402
from t5forge.tasks.builtin import BUNDLED_DATA_DIR  # noqa: E402

VALIDATION = BUNDLED_DATA_DIR / "en_de_lohelp" / "validation.jsonl.gz"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", default="runs/demo", help="a t5forge checkpoint")
    parser.add_argument("--max_length", type=int, default=64, help="the demo's target length")
    parser.add_argument("--batch", type=int, default=100, help="the demo's eval batch")
    args = parser.parse_args()

    rows = [json.loads(line) for line in gzip.open(VALIDATION, "rt")]
    inputs = [f"translate English to German: {row['en']}" for row in rows]
    targets = [row["de"] for row in rows]
    model = t5forge.load(args.model_dir)
    model.input_length_policy = "truncate"  # as the run's evaluation cut inputs to its length
    predictions, seconds = {}, {}
    for dtype in ("float32", "bfloat16"):  # float32 first: narrowing the kernels is one-way
        model.set_weights_dtype(dtype)
        model.generate(inputs[: args.batch], max_length=args.max_length)  # compiles
        start = time.perf_counter()
        predictions[dtype] = [
            text
            for first in range(0, len(inputs), args.batch)
            for text in model.generate(
                inputs[first : first + args.batch], max_length=args.max_length
            )
        ]
        seconds[dtype] = time.perf_counter() - start
    scores = {dtype: bleu(targets, predictions[dtype])["bleu"] for dtype in predictions}
    same = sum(a == b for a, b in zip(predictions["float32"], predictions["bfloat16"]))
    print(
        f"{args.model_dir}: {len(rows)} validation sentences, greedy, max_length {args.max_length}"
    )
    for dtype in predictions:
        print(f"  {dtype:9s} weights: BLEU {scores[dtype]:.2f}  ({seconds[dtype]:.2f} s)")
    print(
        f"  BLEU difference {scores['bfloat16'] - scores['float32']:+.2f}; "
        f"{same} of {len(rows)} translations identical"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
