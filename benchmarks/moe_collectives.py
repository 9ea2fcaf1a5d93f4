"""What an expert-parallel MoE train step moves between devices, and how long it takes.

A tiny tokens-choose top-2 sparse T5 (t5_1_1/tiny with every MLP sparse, 4 experts, T5X's
routing groups of --group_size tokens) trains with MoeTrainer on 8 virtual CPU devices, on
two expert meshes (2 data x 4 expert, and 4 expert x 2 model). For each mesh the script reads
the compiled step's optimized HLO (t5forge.training.collectives) and prints each kind of
collective with its count and bytes per device, those issued by the sparse layers apart, then
the median wall time of --steps steps after one warm-up. Run it from two checkouts to compare
code versions; the times are a smoke check on a shared machine, not a published number.

    python benchmarks/moe_collectives.py [--group_size 16] [--steps 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from t5forge.models.model import build_model  # noqa: E402
from t5forge.models.presets import get_config  # noqa: E402
from t5forge.training import collectives  # noqa: E402
from t5forge.training.moe_trainer import MoeTrainer  # noqa: E402
from t5forge.training.optimizers import adafactor  # noqa: E402
from t5forge.training.partitioning import MoePjitPartitioner  # noqa: E402

NUM_EXPERTS, VOCAB, BATCH, INPUT_LENGTH, TARGET_LENGTH = 4, 256, 8, 16, 8
# The sparse layers' operations are named .../mlp/... in the HLO's op_name metadata.
SPARSE_LAYER = "/mlp/"


def tiny_batch() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    inputs = rng.integers(2, VOCAB, (BATCH, INPUT_LENGTH), dtype=np.int32)
    targets = inputs[:, :TARGET_LENGTH].copy()
    return {
        "encoder_input_tokens": inputs,
        "decoder_input_tokens": np.pad(targets[:, :-1], ((0, 0), (1, 0))),
        "decoder_target_tokens": targets,
        "decoder_loss_weights": np.ones_like(targets, np.float32),
    }


def measure(partitioner, group_size: int, steps: int) -> dict:
    config = get_config(
        "t5_1_1/tiny",
        dtype="float32",
        vocab_size=VOCAB,
        num_experts=NUM_EXPERTS,
        num_selected_experts=2,
        num_sparse_encoder_layers=2,
        num_sparse_decoder_layers=2,
        expert_group_size=group_size,
    )
    model = build_model(config)
    tx = adafactor(0.1, param_logical_axes=model.param_logical_axes())
    trainer = MoeTrainer(model, tx, partitioner, num_expert_partitions=NUM_EXPERTS)
    state = trainer.init_state()
    batch = tiny_batch()
    found = collectives.collectives(trainer.compile_train_step(state, batch).as_text())
    state, metrics = trainer.train_step(state, batch)  # warm-up: compiles the step
    jax.block_until_ready(metrics)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        state, metrics = trainer.train_step(state, batch)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - start)
    return {
        "all": collectives.summary(found),
        "sparse": collectives.summary([c for c in found if SPARSE_LAYER in c.source]),
        "step_ms": 1e3 * float(np.median(times)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group_size", type=int, default=16, help="T5Config.expert_group_size")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    if jax.device_count() != 8:
        parser.error("needs 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8")
    layouts = {
        "2 data x 4 expert": MoePjitPartitioner(NUM_EXPERTS),
        "4 expert x 2 model": MoePjitPartitioner(NUM_EXPERTS, num_partitions=2),
    }
    print(
        f"tiny top-2 MoE, {NUM_EXPERTS} experts, batch {BATCH}, {INPUT_LENGTH}/{TARGET_LENGTH} "
        f"tokens, groups of <= {args.group_size} tokens, jax {jax.__version__}, 8 CPU devices"
    )
    print("| mesh | collective | count (sparse layers) | bytes per device (sparse layers) |")
    print("|---|---|---|---|")
    for name, partitioner in layouts.items():
        result = measure(partitioner, args.group_size, args.steps)
        for kind, (count, size) in result["all"].items():
            sparse_count, sparse_size = result["sparse"].get(kind, (0, 0))
            print(f"| {name} | {kind} | {count} ({sparse_count}) | {size} ({sparse_size}) |")
        print(f"| {name} | median step, {args.steps} steps | {result['step_ms']:.1f} ms | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
