"""Do the bfloat16 fast products train like the plain bfloat16 dots? (issue 36's numerics check)

Trains one small T5 1.1 three times from the same weights on the same batches (a fixed seed:
random token sequences of a small alphabet whose targets are their inputs, a fresh batch each
step) through the real Trainer with AdamW, activations in bfloat16 and float32 master weights:
once with products.py's fast forms (bfloat16 operands, float32 accumulation, written-out backward) and
once with them off (`T5FORGE_FAST_PRODUCTS=0`: the plain bfloat16 dots JAX differentiates, the
path before them); and once in float32, for scale. Every batch is new, so a step's loss
moves with its batch, and two bfloat16 runs drift apart as their roundings differ: the check
compares the curves averaged over --window steps, and prints how far each bfloat16 run lies
from the float32 one (how much bfloat16 itself moves the curve). It fails (exit 1) when the
averaged fast and plain curves differ by more than --tolerance (1%, the issue's bar). It
measures numerics, not speed, so a busy machine changes nothing.

    .venv/bin/python benchmarks/bf16_loss_curve.py --steps 200
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from t5forge.models import products  # noqa: E402
from t5forge.models.model import build_model  # noqa: E402
from t5forge.models.presets import get_config  # noqa: E402
from t5forge.training import optimizers, partitioning  # noqa: E402
from t5forge.training.trainer import Trainer, metrics_to_host  # noqa: E402

# A model big enough that every product has real work and the loss a long way to fall, small
# enough that 200 steps three times take a few minutes on two busy cores.
MODEL = dict(
    emb_dim=128,
    num_heads=4,
    head_dim=32,
    mlp_dim=256,
    num_encoder_layers=2,
    num_decoder_layers=2,
    vocab_size=512,
    dropout_rate=0.0,
)


def batches(steps: int, batch: int, length: int, alphabet: int, seed: int = 0) -> list[dict]:
    """`steps` batches of random tokens (ids 3 to 3 + `alphabet`) whose targets are the
    inputs: a loss that falls fast to log(alphabet), then slowly as the model learns to copy."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        inputs = rng.integers(3, 3 + alphabet, (batch, length), np.int32)
        targets = inputs.copy()
        out.append(
            {
                "encoder_input_tokens": inputs,
                "decoder_input_tokens": np.pad(targets[:, :-1], ((0, 0), (1, 0))),
                "decoder_target_tokens": targets,
                "decoder_loss_weights": np.ones_like(targets, np.float32),
            }
        )
    return out


def loss_curve(dtype: str, fast: bool, data: list[dict], learning_rate: float) -> list[float]:
    """Per-token losses of one training run over `data` with activations in `dtype`, the fast
    products on or off."""
    previous = os.environ.get(products.FAST_PRODUCTS_SWITCH)
    os.environ[products.FAST_PRODUCTS_SWITCH] = "1" if fast else "0"
    try:
        model = build_model(get_config("t5_1_1/tiny", dtype=dtype, **MODEL))
        trainer = Trainer(
            model,
            optimizers.adamw(learning_rate),
            partitioning.PjitPartitioner(devices=jax.devices()[:1]),
        )
        state = trainer.state_from_params(model.init_params(jax.random.PRNGKey(0)))
        losses = []
        for batch in data:
            state, metrics = trainer.train_step(state, batch)
            losses.append(float(metrics_to_host(metrics)["cross_ent_loss_per_all_target_tokens"]))
        return losses
    finally:
        if previous is None:
            del os.environ[products.FAST_PRODUCTS_SWITCH]
        else:
            os.environ[products.FAST_PRODUCTS_SWITCH] = previous


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--alphabet", type=int, default=32, help="distinct tokens in the data")
    parser.add_argument("--learning_rate", type=float, default=3e-3)
    parser.add_argument("--tolerance", type=float, default=0.01)
    parser.add_argument("--window", type=int, default=10, help="steps per averaged point")
    parser.add_argument("--every", type=int, default=20, help="print every this many steps")
    parser.add_argument("--json", type=Path, help="write the curves here")
    args = parser.parse_args()
    if jax.default_backend() != "cpu":
        print(f"the fast forms apply on CPU only; jax runs on {jax.default_backend()}")
        return 1

    data = batches(args.steps, args.batch, args.length, args.alphabet)
    curves = {
        "fast forms": loss_curve("bfloat16", True, data, args.learning_rate),
        "plain dots": loss_curve("bfloat16", False, data, args.learning_rate),
        "float32": loss_curve("float32", True, data, args.learning_rate),
    }
    print(f"loss per token, {args.steps} AdamW steps: step | {' | '.join(curves)}")
    for step in [*range(0, args.steps, args.every), args.steps - 1]:
        print(f"  {step + 1:4d} | " + " | ".join(f"{c[step]:.4f}" for c in curves.values()))
    averaged = {
        name: np.mean(
            np.reshape(curve[: len(curve) // args.window * args.window], (-1, args.window)), 1
        )
        for name, curve in curves.items()
    }

    def largest(name: str, reference: str, per: dict) -> tuple[float, int]:
        relative = np.abs(per[name] - per[reference]) / np.abs(per[reference])
        return float(relative.max()), int(relative.argmax())

    for name, reference in [
        ("fast forms", "plain dots"),
        ("fast forms", "float32"),
        ("plain dots", "float32"),
    ]:
        each, at = largest(name, reference, {n: np.array(c) for n, c in curves.items()})
        mean, window = largest(name, reference, averaged)
        print(
            f"{name} vs {reference}: largest relative difference {each:.2%} (step {at + 1}), "
            f"{mean:.2%} over {args.window}-step means (steps {window * args.window + 1}-"
            f"{(window + 1) * args.window})"
        )
    worst, _ = largest("fast forms", "plain dots", averaged)
    print(
        f"{'within' if worst <= args.tolerance else 'OUTSIDE'} {args.tolerance:.0%}; the bf16 loss "
        f"fell {curves['fast forms'][0]:.3f} -> {averaged['fast forms'][-1]:.3f} (last mean)"
    )
    if args.json:
        args.json.write_text(json.dumps({"curves": curves, **vars(args)}, default=str))
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
