"""Decoding speed: t5forge (jitted, KV-cached JAX) vs Hugging Face `generate` (PyTorch CPU).

T5 1.1 small with random weights (float32), batch 8, 128-token inputs, 64 new tokens per row,
greedy and beam search with 4 beams. Both sides run the very same weights (converted with
t5forge.interop.huggingface). To make every row generate all 64 tokens on both sides without
adding a logits processor to either, the EOS column of the output projection is zeroed: an
EOS logit of exactly 0 never wins against 32k random logits; the script checks that no row
emitted EOS. Each timing is the median of --runs runs after one warm-up run (which includes
t5forge's compilation). New tokens/s = batch * 64 / seconds (beams are not counted).
REFERENCE.md records ~270 new tokens/s for HF greedy on this 2-core machine; CPU time is
printed too, since on a shared machine wall-clock rates also measure the neighbours.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from t5forge.api import Model  # noqa: E402
from t5forge.interop.huggingface import config_to_hf, params_to_hf_state_dict  # noqa: E402
from t5forge.models.configs import get_config  # noqa: E402
from t5forge.models.model import build_model  # noqa: E402

EOS_ID = 1


def _timed(fn, runs: int) -> tuple[float, float, np.ndarray]:
    """(median wall seconds, median CPU seconds, last output) over `runs` after a warm-up."""
    output = fn()
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        output = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), output


def _hf_model(config, params):
    import torch
    import transformers

    hf_config = transformers.T5Config(**config_to_hf(config))
    model = transformers.T5ForConditionalGeneration(hf_config).eval()
    state_dict = {name: torch.tensor(value)
                  for name, value in params_to_hf_state_dict(params, config).items()}
    if not config.logits_via_embedding:
        # transformers 5 ties the head at construction; T5 1.1's is its own tensor.
        model.lm_head.weight = torch.nn.Parameter(state_dict["lm_head.weight"].clone())
        model.all_tied_weights_keys.pop("lm_head.weight")
    model.load_state_dict(state_dict, strict=False)
    return model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--input_length", type=int, default=128)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    import torch

    config = get_config("t5_1_1/small", dtype="float32")
    params = jax.device_get(build_model(config).init_params(jax.random.PRNGKey(0)))
    head = np.array(params["decoder"]["logits_dense"]["kernel"])
    head[:, EOS_ID] = 0.0
    params["decoder"]["logits_dense"]["kernel"] = head
    rng = np.random.default_rng(0)
    inputs = rng.integers(3, config.vocab_size, (args.batch, args.input_length), dtype=np.int32)
    forge = Model(config, params)
    hf = _hf_model(config, params)
    hf_inputs = torch.from_numpy(inputs.astype(np.int64))
    print(f"T5 1.1 small fp32, batch {args.batch}, inputs {args.input_length}, "
          f"{args.new_tokens} new tokens, torch threads {torch.get_num_threads()}, "
          f"jax {jax.__version__} on {jax.devices()[0].platform}")

    for method, beams in (("greedy", 1), ("beam", 4)):
        def run_forge(method=method, beams=beams):
            return forge.generate(inputs, max_length=args.new_tokens, method=method,
                                  num_beams=beams, alpha=0.0)

        def run_hf(beams=beams):
            with torch.no_grad():
                return hf.generate(input_ids=hf_inputs, attention_mask=torch.ones_like(hf_inputs),
                                   max_new_tokens=args.new_tokens, num_beams=beams, do_sample=False,
                                   **({"length_penalty": 0.0} if beams > 1 else {})).numpy()

        forge_wall, forge_cpu, forge_tokens = _timed(run_forge, args.runs)
        hf_wall, hf_cpu, hf_tokens = _timed(run_hf, args.runs)
        for name, tokens, width in (("t5forge", forge_tokens, args.new_tokens),
                                    ("transformers", hf_tokens[:, 1:], args.new_tokens)):
            if tokens.shape[1] != width or (tokens == EOS_ID).any():
                print(f"{name} {method}: rows did not all generate {width} tokens; "
                      f"the timing is not comparable")
                return 1
        new_tokens = args.batch * args.new_tokens
        forge_rate, hf_rate = new_tokens / forge_wall, new_tokens / hf_wall
        print(f"{method:6s} t5forge {forge_rate:8.1f} new tokens/s (cpu {forge_cpu:.2f}s) | "
              f"transformers {hf_rate:8.1f} new tokens/s (cpu {hf_cpu:.2f}s) | "
              f"ratio t5forge/transformers {forge_rate / hf_rate:.2f}x | same tokens: "
              f"{np.array_equal(forge_tokens, hf_tokens[:, 1:])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
