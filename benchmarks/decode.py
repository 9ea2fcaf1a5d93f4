"""Decoding speed: t5forge (jitted, KV-cached JAX) vs Hugging Face `generate` (PyTorch CPU) and
CTranslate2 (float32 and int8).

T5 1.1 small with random weights (float32), batch 8, 128-token inputs, 64 new tokens per row,
greedy and beam search with 4 beams, then the latency of one greedy request (batch 1). Every
side runs the very same weights: transformers' from t5forge.interop.huggingface, CTranslate2's
converted from that transformers model by ctranslate2's own TransformersConverter (with a
word-level tokenizer naming each id, since the weights are random). To make every row generate
all new tokens without adding a logits processor to any side, the EOS column of the output
projection is zeroed: an EOS logit of exactly 0 never wins against 32k random logits; the
script checks that no row emitted EOS. Timing is benchmarks/harness.py's (median of --runs
after a warm-up that includes t5forge's compilation). New tokens/s = batch * new tokens /
seconds (beams are not counted). Without ctranslate2 its column says how to install it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402  (same directory)

from t5forge.api import Model  # noqa: E402
from t5forge.interop.huggingface import config_to_hf, params_to_hf_state_dict  # noqa: E402
from t5forge.models.configs import get_config  # noqa: E402
from t5forge.models.model import build_model  # noqa: E402

EOS_ID = 1
SPECIAL_TOKENS = ("<pad>", "</s>", "<unk>")  # ids 0, 1, 2 as in T5's vocabulary
CT2_COMPUTE_TYPES = ("float32", "int8")
CT2_MISSING = "not installed (pip install -e .[bench])"


def _hf_model(config, params):
    import torch
    import transformers

    hf_config = transformers.T5Config(**config_to_hf(config))
    model = transformers.T5ForConditionalGeneration(hf_config).eval()
    state_dict = {
        name: torch.tensor(value) for name, value in params_to_hf_state_dict(params, config).items()
    }
    if not config.logits_via_embedding:
        # transformers 5 ties the head at construction; T5 1.1's is its own tensor.
        model.lm_head.weight = torch.nn.Parameter(state_dict["lm_head.weight"].clone())
        model.all_tied_weights_keys.pop("lm_head.weight")
    model.load_state_dict(state_dict, strict=False)
    return model


def _token_names(vocab_size: int) -> list[str]:
    return [*SPECIAL_TOKENS, *(f"t{i}" for i in range(len(SPECIAL_TOKENS), vocab_size))]


def _ct2_translators(hf_model, vocab_size: int, threads: int) -> dict:
    """{compute type: ctranslate2.Translator} of `hf_model` saved and converted by ctranslate2."""
    import ctranslate2
    import tokenizers
    import transformers

    transformers.utils.logging.disable_progress_bar()
    names = _token_names(vocab_size)
    word_level = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({name: i for i, name in enumerate(names)}, unk_token="<unk>")
    )
    word_level.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=word_level, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    with tempfile.TemporaryDirectory(prefix="t5forge-bench-ct2-") as scratch:
        hf_dir, ct2_dir = Path(scratch) / "hf", Path(scratch) / "ct2"
        hf_model.save_pretrained(hf_dir)
        tokenizer.save_pretrained(hf_dir)
        ctranslate2.converters.TransformersConverter(str(hf_dir)).convert(str(ct2_dir))
        return {
            compute_type: ctranslate2.Translator(
                str(ct2_dir), device="cpu", compute_type=compute_type, intra_threads=threads
            )
            for compute_type in CT2_COMPUTE_TYPES
        }


def _sides(inputs: np.ndarray, new_tokens: int, beams: int, forge, hf, translators) -> dict:
    """{side name: a call returning the [rows, new_tokens] int tokens it generated}."""
    import torch

    method = "beam" if beams > 1 else "greedy"
    hf_inputs = torch.from_numpy(inputs.astype(np.int64))
    names = _token_names(forge.config.vocab_size)
    ids = {name: i for i, name in enumerate(names)}
    source = [[names[i] for i in row] for row in inputs]

    def run_forge():
        return forge.generate(
            inputs, max_length=new_tokens, method=method, num_beams=beams, alpha=0.0
        )

    def run_hf():
        with torch.no_grad():
            return hf.generate(
                input_ids=hf_inputs,
                attention_mask=torch.ones_like(hf_inputs),
                max_new_tokens=new_tokens,
                num_beams=beams,
                do_sample=False,
                **({"length_penalty": 0.0} if beams > 1 else {}),
            ).numpy()[:, 1:]

    def ct2_call(translator):
        def run_ct2():
            results = translator.translate_batch(
                source, beam_size=beams, length_penalty=0.0, max_decoding_length=new_tokens
            )
            return np.array([[ids[token] for token in result.hypotheses[0]] for result in results])

        return run_ct2

    return {
        "t5forge": run_forge,
        "transformers": run_hf,
        **{f"ctranslate2 {kind}": ct2_call(t) for kind, t in translators.items()},
    }


def _check(outputs: dict, rows: int, new_tokens: int) -> bool:
    """Every side generated all new tokens (no EOS); prints which agree with t5forge's."""
    for side, tokens in outputs.items():
        if tokens.shape != (rows, new_tokens) or (tokens == EOS_ID).any():
            print(f"{side}: rows did not all generate {new_tokens} tokens; not comparable")
            return False
    same = {
        side: bool(np.array_equal(tokens, outputs["t5forge"]))
        for side, tokens in outputs.items()
        if side != "t5forge"
    }
    print(f"  same tokens as t5forge: {same}")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--input_length", type=int, default=128)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--runs", type=harness.repeats, default=harness.MIN_REPEATS)
    harness.add_arguments(parser, "decode")
    args = parser.parse_args()

    import torch

    bench = harness.Benchmark.from_args("decode", args)
    config = get_config("t5_1_1/small", dtype="float32")
    params = jax.device_get(build_model(config).init_params(jax.random.PRNGKey(0)))
    head = np.array(params["decoder"]["logits_dense"]["kernel"])
    head[:, EOS_ID] = 0.0
    params["decoder"]["logits_dense"]["kernel"] = head
    rng = np.random.default_rng(0)
    inputs = rng.integers(3, config.vocab_size, (args.batch, args.input_length), dtype=np.int32)
    forge = Model(config, params)
    hf = _hf_model(config, params)
    try:
        translators = _ct2_translators(hf, config.vocab_size, os.cpu_count())
    except ImportError:
        translators = {}
    print(
        f"T5 1.1 small fp32, inputs {args.input_length}, {args.new_tokens} new tokens, torch "
        f"threads {torch.get_num_threads()}, jax {jax.__version__} on "
        f"{jax.devices()[0].platform}, ctranslate2 "
        f"{'float32 + int8' if translators else CT2_MISSING}",
        flush=True,
    )

    shape = f"{args.input_length} in / {args.new_tokens} new"
    settings = (
        ("greedy", f"greedy decode, batch {args.batch}, {shape}", inputs, 1, "throughput"),
        ("beam 4", f"beam 4 decode, batch {args.batch}, {shape}", inputs, 4, "throughput"),
        ("batch-1 greedy", f"batch-1 greedy latency, {shape}", inputs[:1], 1, "latency"),
    )
    for prefix, row, rows, beams, metric in settings:
        sides = _sides(rows, args.new_tokens, beams, forge, hf, translators)
        print(row, flush=True)
        outputs = bench.run(
            {f"{prefix}: {side}": fn for side, fn in sides.items()},
            args.runs,
            work=len(rows) * args.new_tokens,
            unit="new tokens/s",
        )
        if not _check(
            {side.split(": ")[1]: out for side, out in outputs.items()}, len(rows), args.new_tokens
        ):
            return 1
        for peer in ("transformers", *(f"ctranslate2 {kind}" for kind in CT2_COMPUTE_TYPES)):
            if f"{prefix}: {peer}" in bench.sides:
                bench.compare(row, f"{prefix}: t5forge", f"{prefix}: {peer}", metric, peer)
            else:
                bench.peer_missing(row, f"{prefix}: t5forge", peer, CT2_MISSING)
    bench.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
