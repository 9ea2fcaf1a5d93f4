"""The real Trainer on a real T5 on 8 virtual CPU devices vs 1 device; prints a JSON report.

Run as `XLA_FLAGS=--xla_force_host_platform_device_count=8 python <this file>` (the test in
test_trainer_multidevice.py does). For each layout (1 device, 4 data x 2 model, FSDP on the
same mesh) it builds `t5_1_1/tiny` in float32 with Adafactor, creates the train state already
sharded through `Trainer.init_state`, runs five `Trainer.train_step`s on the same batches and
reports the losses, the parameter layout and how often the step compiled. Dropout is off: its
mask bits come from XLA's RngBitGenerator, whose stream depends on how an array is split.
"""

import json

import numpy as np
from multidevice_layouts import eight_device_layouts, partition_specs

from t5forge.models.model import build_model
from t5forge.models.presets import get_config
from t5forge.training.optimizers import adafactor
from t5forge.training.trainer import Trainer, metrics_to_host

VOCAB, BATCH, INPUT_LENGTH, TARGET_LENGTH, STEPS = 256, 8, 16, 8, 5


def make_batches() -> list[dict[str, np.ndarray]]:
    """Copy-task batches shaped like the EncDec feature converter's output, with some padding.

    Targets repeat the first input tokens, so the loss has something to learn in five steps.
    """
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(STEPS):
        inputs = rng.integers(2, VOCAB, (BATCH, INPUT_LENGTH), dtype=np.int32)
        inputs[:, -3:] = 0
        targets = inputs[:, :TARGET_LENGTH].copy()
        targets[::2, -2:] = 0
        decoder_inputs = np.concatenate([np.zeros((BATCH, 1), np.int32), targets[:, :-1]], axis=1)
        batches.append(
            {
                "encoder_input_tokens": inputs,
                "decoder_input_tokens": decoder_inputs,
                "decoder_target_tokens": targets,
                "decoder_loss_weights": (targets > 0).astype(np.float32),
            }
        )
    return batches


def run(partitioner, batches, config=None, trainer_cls=Trainer) -> dict:
    """The report of one layout; `config` replaces t5_1_1/tiny (multidevice_gemma_check.py),
    `trainer_cls` the Trainer (multidevice_expert_check.py's MoeTrainer)."""
    model = build_model(config or get_config("t5_1_1/tiny", dtype="float32", vocab_size=VOCAB))
    tx = adafactor(0.1, param_logical_axes=model.param_logical_axes())
    trainer = trainer_cls(model, tx, partitioner, seed=0)
    state = trainer.init_state()
    losses = []
    for batch in batches:
        state, metrics = trainer.train_step(state, batch)
        losses.append(metrics_to_host(metrics)["loss"])
    return {
        "losses": losses,
        "specs": partition_specs(state),
        "devices": partitioner.mesh.devices.size,
        "compilations": trainer._train_step._cache_size(),
    }


def main():
    layouts = eight_device_layouts()
    batches = make_batches()
    report = {name: run(partitioner, batches) for name, partitioner in layouts.items()}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
