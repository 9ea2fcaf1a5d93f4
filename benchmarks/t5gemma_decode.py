"""T5Gemma S-S greedy decoding: t5forge (jitted, KV-cached JAX) vs Hugging Face `generate`
(PyTorch CPU), the same random weights on both sides.

The published T5Gemma S-S architecture (t5gemma/s_s: 312,517,632 parameters, Gemma's 256,000-
entry vocabulary) in float32, batch 8, 128-token inputs, 64 new tokens per row, greedy. The
weights are drawn once by t5forge and written for transformers through t5forge's own T5Gemma
export (t5forge.interop.hf_t5gemma), which transformers loads as T5GemmaForConditionalGeneration
(its default attention). The decoder's embedding row of EOS is zeroed: the head is tied to it,
so EOS's logit is exactly 0 (soft-capped: still 0) and never wins against 256k random logits,
and every row generates every new token on both sides with no logits processor; the script
checks that none emitted EOS. Each side runs in a process of its own (benchmarks/isolated.py),
timed by benchmarks/harness.py (medians of --runs, at least 5, after a warm-up that includes
t5forge's compilation; CPU model and load average printed and recorded). The sides, the token
check and the timing are benchmarks/decode.py's; only the model differs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import decode  # noqa: E402  (same directory)
import harness  # noqa: E402  (same directory)
import same_weights  # noqa: E402  (same directory)
from isolated import IsolatedSide  # noqa: E402  (same directory)

PRESET = "t5gemma/s_s"


def config():
    """The T5Gemma S-S preset in float32, as both sides compute."""
    from t5forge.models.configs import T5Config
    from t5forge.models.t5gemma_presets import T5GEMMA_PRESET_FIELDS

    return T5Config(**{**T5GEMMA_PRESET_FIELDS[PRESET], "dtype": "float32"})


def never_eos(params):
    """`params` with the decoder embedding's EOS row zeroed: the tied head's EOS logit is 0."""
    embedding = np.array(params["decoder"]["token_embedder"]["embedding"])
    embedding[same_weights.EOS_ID] = 0.0
    params["decoder"]["token_embedder"]["embedding"] = embedding
    return params


def hf_dir(params, work_dir: Path) -> Path:
    """transformers' T5GemmaForConditionalGeneration holding `params`, saved in `work_dir`."""
    import torch
    import transformers

    from t5forge.interop import hf_t5gemma

    transformers.utils.logging.disable_progress_bar()
    model = transformers.T5GemmaForConditionalGeneration(
        transformers.T5GemmaConfig(**hf_t5gemma.config_to_hf(config()))
    )
    state_dict = {
        name: torch.tensor(value)
        for name, value in hf_t5gemma.params_to_hf_state_dict(params, config()).items()
    }
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    tied = {"lm_head.out_proj.weight"}  # the decoder's embedding, tied by transformers
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"weights not carried over: missing {missing}, unexpected {unexpected}")
    model.save_pretrained(work_dir / "hf")
    return work_dir / "hf"


def forge_side(params_path: str):
    """The t5forge side (decode.forge_generate) on the weights `same_weights.write_params` wrote."""
    from t5forge.api import Model

    return decode.forge_generate(Model(config(), same_weights.read_params(params_path)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    decode.add_shape_arguments(parser)
    harness.add_arguments(parser, "t5gemma_decode")
    args = parser.parse_args()

    import jax

    from t5forge.models.model import build_model

    bench = harness.Benchmark.from_args("t5gemma_decode", args)
    params = jax.device_get(build_model(config()).init_params(jax.random.PRNGKey(0)))
    params = never_eos(params)
    rng = np.random.default_rng(0)
    vocab_size = config().vocab_size
    inputs = rng.integers(3, vocab_size, (args.batch, args.input_length), dtype=np.int32)
    with tempfile.TemporaryDirectory(prefix="t5forge-bench-t5gemma-") as scratch:
        params_path = same_weights.write_params(params, Path(scratch))
        sides = {
            "t5forge": IsolatedSide("t5gemma_decode:forge_side", params_path=str(params_path)),
            "transformers": IsolatedSide(
                "decode:hf_side", hf_dir=str(hf_dir(params, Path(scratch)))
            ),
        }
        try:
            print(
                f"T5Gemma S-S fp32, batch {args.batch}, inputs {args.input_length}, "
                f"{args.new_tokens} new tokens, greedy, each side in its own process "
                f"({os.cpu_count()} threads)",
                flush=True,
            )
            calls = {
                f"greedy: {name}": side.bind(rows=inputs, new_tokens=args.new_tokens, beams=1)
                for name, side in sides.items()
            }
            outputs = bench.run(
                calls, args.runs, work=args.batch * args.new_tokens, unit="new tokens/s"
            )
            by_side = {name.split(": ")[1]: tokens for name, tokens in outputs.items()}
            if not decode._check(by_side, args.batch, args.new_tokens):
                return 1
            row = (
                f"T5Gemma S-S greedy decode, batch {args.batch}, "
                f"{args.input_length} in / {args.new_tokens} new"
            )
            bench.compare(row, "greedy: t5forge", "greedy: transformers", "throughput")
        finally:
            for side in sides.values():
                side.close()
    bench.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
