"""Training speed: t5forge `Trainer.train_step` (jitted JAX) vs Hugging Face PyTorch.

T5 1.1 small (dropout 0), batch 8, 512 input and 114 target tokens, no padding. Both
sides start from the very same weights (converted with t5forge.interop.huggingface) and train
on the same batch: t5forge with AdamW and with Adafactor (--optimizers) through the real
Trainer, transformers' T5ForConditionalGeneration with torch.optim.AdamW; one row per t5forge
optimizer and compute dtype (--dtypes), each side in a process of its own
(benchmarks/isolated.py). In bfloat16 t5forge runs T5X's default policy (bfloat16
activations, float32 master weights) and transformers runs under torch.autocast(bfloat16),
its float32 weights likewise the master copy. Timing is
benchmarks/harness.py's in blocks: each side's --warmup steps (t5forge's include compilation)
then its --steps (alias --runs) timed steps back to back, as a training loop runs them, one side
after the other (harness.time_in_blocks says why not in turns); median/min/max. Tokens/s counts inputs + targets of
every row. It also prints model FLOPs utilisation (t5forge.training.flops:
the step's model FLOPs over the device's peak FLOP/s), 'n/a' where the peak is unknown (CPUs).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402  (same directory)
import same_weights  # noqa: E402  (same directory)
from isolated import IsolatedSide, run_sides  # noqa: E402  (same directory)

from t5forge.models.model import build_model  # noqa: E402
from t5forge.models.presets import get_config  # noqa: E402
from t5forge.training.flops import local_peak_flops, mfu, model_flops_per_step  # noqa: E402

LEARNING_RATE = 1e-4
OPTIMIZERS = ("adamw", "adafactor")
DTYPES = ("float32", "bfloat16")


def _choices(kind: str, allowed: tuple[str, ...]):
    """argparse type of a comma-separated subset of `allowed` (--optimizers, --dtypes)."""

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(text.split(","))
        unknown = sorted(set(names) - set(allowed))
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {kind} {', '.join(unknown)}; choose from {', '.join(allowed)}"
            )
        return names

    return parse


# Factories of the sides, each called in its own worker (benchmarks/isolated.py), as in
# decode.py and scaling.py, so no side shares a runtime or an allocator with another (what
# slowed t5forge's step after transformers' was the order of the steps, not a shared process:
# see harness.time_in_blocks). Each returns a call running one train step.


def forge_side(
    params_path: str, config_name: str, optimizer: str, batch: dict, dtype: str = "float32"
):
    """One t5forge train step on one device per call (the state is donated), activations in
    `dtype` (the weights stay float32)."""
    from t5forge.models.model import build_model
    from t5forge.models.presets import get_config
    from t5forge.training import optimizers

    model = build_model(get_config(config_name, dtype=dtype, dropout_rate=0.0))
    tx = (
        optimizers.adamw(LEARNING_RATE)
        if optimizer == "adamw"
        else optimizers.adafactor(LEARNING_RATE, param_logical_axes=model.param_logical_axes())
    )
    return forge_step(model, tx, params_path, batch)


def forge_step(model, tx, params_path: str, batch: dict):
    """A call that runs one t5forge train step of `model` under `tx` from the weights at
    `params_path` on one device (the state is donated) and waits for it."""
    import jax

    from t5forge.training import partitioning
    from t5forge.training.trainer import Trainer, metrics_to_host

    trainer = Trainer(model, tx, partitioning.PjitPartitioner(devices=jax.devices()[:1]))
    holder = {"state": trainer.state_from_params(same_weights.read_params(params_path))}

    def step():
        holder["state"], metrics = trainer.train_step(holder["state"], batch)
        return metrics_to_host(metrics)  # waits for the step

    return step


def hf_side(hf_dir: str, batch: dict, dtype: str = "float32"):
    """One transformers train step (torch.optim.AdamW) per call, under bfloat16 autocast
    where `dtype` is bfloat16."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = same_weights.load_hf(hf_dir).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    inputs = torch.from_numpy(batch["encoder_input_tokens"].astype(np.int64)).to(device)
    labels = torch.from_numpy(batch["decoder_target_tokens"].astype(np.int64)).to(device)
    mask = torch.ones_like(inputs)
    return torch_step(
        model,
        optimizer,
        autocast_bf16=dtype == "bfloat16",
        input_ids=inputs,
        attention_mask=mask,
        labels=labels,
    )


def torch_step(model, optimizer, autocast_bf16: bool = False, **inputs):
    """A call that runs one transformers train step of `model` on `inputs` (its loss is the
    model's own) and waits for it; its forward pass under bfloat16 autocast if asked."""
    import torch

    device_type = next(model.parameters()).device.type

    def step():
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=autocast_bf16):
            loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()  # waits for the step

    return step


_SHORT = {"float32": "fp32", "bfloat16": "bf16"}


def _side_names(dtype: str, optimizers: tuple[str, ...]) -> tuple[dict[str, str], str]:
    """({optimizer: t5forge side's name}, transformers side's name) of one dtype's rows; the
    float32 rows keep their names of before the bfloat16 rows came."""
    if dtype == "float32":
        return {o: f"t5forge ({o})" for o in optimizers}, "transformers (adamw)"
    return (
        {o: f"t5forge bf16 ({o})" for o in optimizers},
        "transformers bf16 autocast (adamw)",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="t5_1_1/small")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--input_length", type=int, default=512)
    parser.add_argument("--target_length", type=int, default=114)
    parser.add_argument(
        "--steps",
        "--runs",
        type=harness.repeats,
        default=harness.MIN_REPEATS,
        help="timed steps of each side",
    )
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--optimizers",
        type=_choices("optimizer", OPTIMIZERS),
        default=OPTIMIZERS,
        help="t5forge's optimizers, comma-separated (transformers always runs AdamW)",
    )
    parser.add_argument(
        "--dtypes",
        type=_choices("dtype", DTYPES),
        default=DTYPES,
        help="compute dtypes, comma-separated: a row of each side per dtype",
    )
    harness.add_arguments(parser, "train_step")
    args = parser.parse_args()

    import torch

    bench = harness.Benchmark.from_args("train_step", args)

    config = get_config(args.config, dtype="float32", dropout_rate=0.0)
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
    device = jax.devices()[0]
    torch_device = "cuda" if torch.cuda.is_available() else "cpu"
    print(
        f"{args.config} {'/'.join(args.dtypes)}, batch {args.batch}, {args.input_length}/{args.target_length} "
        f"tokens, {args.steps} timed steps after {args.warmup} | jax {jax.__version__} on "
        f"{device.device_kind} | torch {torch.__version__} on {torch_device}, "
        f"{torch.get_num_threads()} threads"
    )

    tokens = args.batch * (args.input_length + args.target_length)
    rows = {dtype: _side_names(dtype, args.optimizers) for dtype in args.dtypes}
    with tempfile.TemporaryDirectory(prefix="t5forge-bench-train-") as scratch:
        params_path = same_weights.write_params(params, Path(scratch))
        hf_dir = Path(scratch) / "hf"
        same_weights.hf_model(config, params).save_pretrained(hf_dir)
        sides = {}
        for dtype, (ours, peer) in rows.items():
            for optimizer, name in ours.items():
                sides[name] = IsolatedSide(
                    "train_step:forge_side",
                    params_path=str(params_path),
                    config_name=args.config,
                    optimizer=optimizer,
                    batch=batch,
                    dtype=dtype,
                )
            sides[peer] = IsolatedSide(
                "train_step:hf_side", hf_dir=str(hf_dir), batch=batch, dtype=dtype
            )
        outputs = run_sides(
            bench,
            sides,
            args.steps,
            work=tokens,
            unit="tokens/s",
            warmup=args.warmup,
            blocks=True,
        )
    flops = model_flops_per_step(config, args.batch, args.input_length, args.target_length)
    for dtype, (ours, peer) in rows.items():
        losses = ", ".join(
            f"{name} {outputs[name]['cross_ent_loss_per_all_target_tokens']:.4f}"
            for name in ours.values()
        )
        print(f"  {dtype} loss/token after the last step: {losses}, {peer} {outputs[peer]:.4f}")
        for optimizer, name in ours.items():
            bench.compare(
                f"train step, {args.config}, batch {args.batch}, "
                f"{args.input_length}/{args.target_length}, {_SHORT[dtype]}, t5forge {optimizer}",
                name,
                peer,
            )
        peak = local_peak_flops(dtype)
        if peak is None:
            print(
                f"MFU n/a: no {dtype} peak FLOP/s known for {device.device_kind!r} "
                f"({flops / 1e12:.2f} model TFLOP per step)"
            )
        else:
            figures = " | ".join(
                f"{name} {mfu(flops, bench.sides[name]['median_s'], peak):.1%}"
                for name in (*ours.values(), peer)
            )
            print(
                f"MFU {figures} ({flops / 1e12:.2f} model TFLOP per step, "
                f"peak {peak / 1e12:.0f} TFLOP/s per device)"
            )
    bench.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
