"""Mixture-of-experts training speed: t5forge `Trainer.train_step` vs transformers' Switch.

A Switch-base-8-shaped model (Flaxformer's moe/models/switch_base.gin with 8 experts: d_model
768, 12 + 12 layers, 12 heads of 64, d_ff 3072, ReLU, 8 experts in every other layer,
expert_capacity 64, tied head; float32, dropout 0), or `--shape tiny` for a smoke run. Both
sides compute the same network from the very same weights (converted with
t5forge.interop.hf_switch): each sequence one routing group with a fixed capacity, as
transformers routes, and the router z and auxiliary losses in the training loss. t5forge trains
through the real Trainer with AdamW, transformers' SwitchTransformersForConditionalGeneration
with torch.optim.AdamW; each side in a process of its own (benchmarks/isolated.py), timed in
blocks as benchmarks/train_step.py (harness.time_in_blocks): --warmup steps (t5forge's include
compilation), then --steps timed ones; median/min/max, CPU-seconds, and the load average before
the run. Tokens/s counts inputs + targets of every row. Only one side's worker lives at a time
and the measuring process drops its copy of the weights once written: at batch 8 t5forge's step
peaks at 18 GB (XLA's memory analysis: 7.4 GB of AdamW state, 10.7 GB temporaries, docs/moe.md),
which fits a 24 GB machine only alone.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402  (same directory)
import same_weights  # noqa: E402  (same directory)
from isolated import IsolatedSide, run_sides  # noqa: E402  (same directory)
from train_step import forge_step, torch_step  # noqa: E402  (same directory)

from t5forge.interop.huggingface import save_hf_dir  # noqa: E402
from t5forge.models.configs import T5Config  # noqa: E402
from t5forge.models.model import build_model  # noqa: E402

LEARNING_RATE = 1e-4
# Switch Base with 8 experts (Flaxformer's switch_base.gin sizes; HF's expert_capacity 64), and a
# tiny model of the same form for smoke runs.
SHAPES = {
    "base-8": dict(
        vocab_size=32128,
        emb_dim=768,
        num_heads=12,
        num_encoder_layers=12,
        num_decoder_layers=12,
        head_dim=64,
        mlp_dim=3072,
        num_experts=8,
        num_sparse_encoder_layers=6,
        num_sparse_decoder_layers=6,
        expert_capacity=64,
    ),
    "tiny": dict(
        vocab_size=512,
        emb_dim=32,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        head_dim=8,
        mlp_dim=64,
        num_experts=4,
        num_sparse_encoder_layers=1,
        num_sparse_decoder_layers=1,
        expert_capacity=8,
    ),
}


def switch_config(shape: str) -> T5Config:
    """A Switch Transformer of `shape` as transformers computes it (hf_switch.config_from_hf)."""
    return T5Config(
        **SHAPES[shape],
        mlp_activations=("relu",),
        logits_via_embedding=True,
        dtype="float32",
        dropout_rate=0.0,
        encoder_sparse_layout="huggingface",
        decoder_sparse_layout="huggingface",
        routing_groups="sequence",
        router_z_loss_factor=0.001,
        aux_loss_factor=0.001,
    )


def forge_side(params_path: str, config: T5Config, batch: dict):
    """One t5forge train step (AdamW) on one device per call (the state is donated)."""
    from t5forge.training import optimizers

    step = forge_step(build_model(config), optimizers.adamw(LEARNING_RATE), params_path, batch)
    _return_freed_memory()
    return step


def _return_freed_memory() -> None:
    """Hands what glibc's malloc keeps of freed memory back to the system: building the train
    state frees the weights as read and their device copy (4.6 GB at Switch base), and the
    measuring process its weights once written, which otherwise stay resident beside the
    step's own peak."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def hf_side(hf_dir: str, batch: dict):
    """One transformers train step (torch.optim.AdamW, router losses included) per call."""
    import torch
    import transformers

    model = transformers.SwitchTransformersForConditionalGeneration.from_pretrained(hf_dir).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    inputs = torch.from_numpy(batch["encoder_input_tokens"].astype(np.int64))
    labels = torch.from_numpy(batch["decoder_target_tokens"].astype(np.int64))
    mask = torch.ones_like(inputs)
    return torch_step(
        model,
        optimizer,
        input_ids=inputs,
        attention_mask=mask,
        labels=labels,
        output_router_logits=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="base-8")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--input_length", type=int, default=512)
    parser.add_argument("--target_length", type=int, default=114)
    parser.add_argument(
        "--steps", "--runs", type=harness.repeats, default=harness.MIN_REPEATS, help="timed steps"
    )
    parser.add_argument("--warmup", type=int, default=2)
    harness.add_arguments(parser, "moe_train_step")
    args = parser.parse_args()

    import torch

    bench = harness.Benchmark.from_args("moe_train_step", args)
    config = switch_config(args.shape)
    params = jax.device_get(build_model(config).init_params(jax.random.PRNGKey(0)))
    rng = np.random.default_rng(0)
    targets = rng.integers(3, config.vocab_size, (args.batch, args.target_length), np.int32)
    batch = {
        "encoder_input_tokens": rng.integers(
            3, config.vocab_size, (args.batch, args.input_length), np.int32
        ),
        "decoder_input_tokens": np.pad(targets[:, :-1], ((0, 0), (1, 0))),
        "decoder_target_tokens": targets,
        "decoder_loss_weights": np.ones_like(targets, np.float32),
    }
    print(
        f"Switch {args.shape} float32, batch {args.batch}, {args.input_length}/"
        f"{args.target_length} tokens, {args.steps} timed steps after {args.warmup} | jax "
        f"{jax.__version__} on {jax.devices()[0].device_kind} | torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    tokens = args.batch * (args.input_length + args.target_length)
    ours, peer = "t5forge (adamw)", "transformers (adamw)"
    with tempfile.TemporaryDirectory(prefix="t5forge-bench-moe-") as scratch:
        params_path = same_weights.write_params(params, Path(scratch))
        hf_dir = Path(scratch) / "hf"
        save_hf_dir(params, config, hf_dir)  # model_type 'switch_transformers'
        del params  # 2.5 GB at Switch base: each worker reads its own copy
        _return_freed_memory()
        sides = {
            ours: lambda: IsolatedSide(
                "moe_train_step:forge_side",
                params_path=str(params_path),
                config=config,
                batch=batch,
            ),
            peer: lambda: IsolatedSide("moe_train_step:hf_side", hf_dir=str(hf_dir), batch=batch),
        }
        outputs = {}
        # One worker alive at a time: a side's train state (7.4 GB with AdamW at Switch base)
        # must not sit beside the other side's step on a 24 GB machine.
        for name, start in sides.items():
            outputs |= run_sides(
                bench,
                {name: start()},
                args.steps,
                work=tokens,
                unit="tokens/s",
                warmup=args.warmup,
                blocks=True,
            )
    print(
        f"  loss/token after the last step: t5forge "
        f"{outputs[ours]['cross_ent_loss_per_all_target_tokens']:.4f}, transformers "
        f"{outputs[peer]:.4f} (its mean includes the router losses)"
    )
    bench.compare(
        f"MoE train step, Switch {args.shape}, batch {args.batch}, "
        f"{args.input_length}/{args.target_length}, fp32",
        ours,
        peer,
    )
    bench.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
