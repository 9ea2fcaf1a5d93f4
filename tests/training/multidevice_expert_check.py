"""multidevice_trainer_check.py's report for a tokens-choose top-2 sparse T5 under T5X's
expert parallelism: five MoeTrainer steps on 1 device and on 8 with an expert axis of 4
(2 data x 4 expert, and 1 data x 4 expert x 2 model), the collectives of the step compiled
for each of those two meshes, greedy decodes on all three, and the meshes MoePjitPartitioner carves for other
NUM_EXPERT_PARTITIONS. Run with 8 virtual CPU devices, as
test_expert_parallel_multidevice.py does."""

import dataclasses
import functools
import json

import jax
from multidevice_trainer_check import VOCAB, make_batches, run

from t5forge.errors import ConfigError
from t5forge.models.model import build_model
from t5forge.models.presets import get_config
from t5forge.training import collectives
from t5forge.training.moe_trainer import MoeTrainer
from t5forge.training.optimizers import adafactor
from t5forge.training.partitioning import MoePjitPartitioner

NUM_EXPERTS = 4


def sparse_config():
    """t5_1_1/tiny with every layer's MLP sparse: 4 experts, tokens choose 2 (T5X's groups of
    at most 16 tokens: 8 per encoder layer, which split over the 8 devices, 4 per decoder
    layer, which split only over the expert axis; a capacity factor of 1 drops tokens), both
    router losses in the loss."""
    return get_config(
        "t5_1_1/tiny",
        dtype="float32",
        vocab_size=VOCAB,
        num_experts=NUM_EXPERTS,
        num_selected_experts=2,
        num_sparse_encoder_layers=2,
        num_sparse_decoder_layers=2,
        router_z_loss_factor=1e-3,
        aux_loss_factor=1e-2,
        expert_group_size=16,
    )


def main():
    assert jax.device_count() == 8, "set XLA_FLAGS=--xla_force_host_platform_device_count=8"
    layouts = {
        "single": MoePjitPartitioner(NUM_EXPERTS, devices=jax.devices()[:1]),
        "data2_expert4": MoePjitPartitioner(NUM_EXPERTS),
        "expert4_model2": MoePjitPartitioner(NUM_EXPERTS, num_partitions=2),
    }
    trainer_cls = functools.partial(MoeTrainer, num_expert_partitions=NUM_EXPERTS)
    batches = make_batches()
    report = {
        name: {**run(partitioner, batches, sparse_config(), trainer_cls)}
        for name, partitioner in layouts.items()
    }
    for name in ("data2_expert4", "expert4_model2"):
        report[name]["collectives"] = compiled_collectives(layouts[name], batches[0])
    report["greedy"] = {
        name: greedy_decode(partitioner, batches[0]) for name, partitioner in layouts.items()
    }
    report["meshes"] = {
        f"{asked}x{model}": list(
            MoePjitPartitioner(asked, num_partitions=model).mesh.shape.values()
        )
        for asked, model in [(4, 1), (8, 1), (3, 1), (16, 2)]
    }
    report["six_experts_on_four"] = uneven_experts_refusal()
    print(json.dumps(report))


def compiled_collectives(partitioner, batch) -> list[list]:
    """[kind, result arrays, source op] of each collective in the optimized HLO of the
    train step compiled for `partitioner`'s mesh."""
    model = build_model(sparse_config())
    tx = adafactor(0.1, param_logical_axes=model.param_logical_axes())
    trainer = MoeTrainer(model, tx, partitioner, num_expert_partitions=NUM_EXPERTS)
    hlo = trainer.compile_train_step(trainer.init_state(), batch).as_text()
    return [[c.kind, list(c.arrays), c.source] for c in collectives.collectives(hlo)]


def greedy_decode(partitioner, batch) -> dict:
    """Greedy tokens and scores of the untrained model, decoded by a program the partitioner
    compiled: cached one-token steps, each 8 tokens in 4 routing groups of 2."""
    model = build_model(sparse_config())
    params = model.init_params(jax.random.PRNGKey(0))
    shardings = partitioner.sharding(model.param_logical_axes(), jax.eval_shape(lambda: params))
    decode = partitioner.partition(
        lambda p, b: model.predict_batch_with_aux(p, b),
        in_shardings=(shardings, "batch"),
        out_shardings=None,
    )
    inputs = {name: batch[name] for name in ("encoder_input_tokens", "decoder_input_tokens")}
    tokens, aux = decode(jax.device_put(params, shardings), inputs)
    return {"tokens": tokens.tolist(), "scores": aux["scores"].tolist()}


def uneven_experts_refusal() -> str:
    """The error for 6 experts with NUM_EXPERT_PARTITIONS=6 on 8 devices (expert axis 4)."""
    model = build_model(dataclasses.replace(sparse_config(), num_experts=6))
    try:
        MoeTrainer(model, adafactor(0.1), MoePjitPartitioner(6), num_expert_partitions=6)
    except ConfigError as error:
        return str(error)
    return "accepted"


if __name__ == "__main__":
    main()
