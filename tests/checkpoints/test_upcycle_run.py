"""Sparse upcycling as a user reaches it: `t5forge train` with runs/sparse_upcycle.gin starts
a mixture-of-experts model from the session's dense tiny checkpoint (T5X's sparse_upcycle.gin
and its UpcycleCheckpointer), on the MoE partitioner and trainer."""

import json
from pathlib import Path

import numpy as np
import pytest

from t5forge.checkpoints.reader import read

NUM_EXPERTS = 4
SPARSE_FLAGS = [
    f"--gin.NUM_EXPERTS={NUM_EXPERTS}",
    f"--gin.T5Config.num_experts={NUM_EXPERTS}",
    "--gin.T5Config.num_sparse_encoder_layers=1",
    "--gin.T5Config.num_sparse_decoder_layers=1",
    "--gin.T5Config.num_selected_experts=2",
]
ROUTER = "layers_1/mlp/router/router_weights/w/kernel"


@pytest.mark.slow
def test_sparse_upcycle_gin_trains_a_sparse_model_from_the_dense_checkpoint(
    tiny_runs, tiny_trained, tmp_path
):
    model_dir = tmp_path / "upcycled"
    dense_checkpoint = tiny_trained / "checkpoint_12"
    result = tiny_runs.train(
        model_dir,
        1,
        "--gin_file=runs/sparse_upcycle.gin",
        f"--gin.INITIAL_CHECKPOINT_PATH={dense_checkpoint}",
        *SPARSE_FLAGS,
        "--gin.utils.create_learning_rate_scheduler.base_learning_rate=0.0",
        period=1,
        check=True,
    )
    fresh = f"(decoder/{ROUTER}, encoder/{ROUTER})"
    assert f"kept 2 freshly initialised {fresh} of {dense_checkpoint}" in result.stderr
    config_gin = (model_dir / "config.gin").read_text()
    assert "train.partitioner = @partitioning.MoePjitPartitioner()" in config_gin
    assert "train.trainer_cls = @trainer.MoeTrainer" in config_gin
    records = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("experts/auxiliary_loss" in record for record in records)
    # The smallest learning rate (T5X's schedules floor it at 1e-8) leaves step 1's parameters
    # as restored to 1e-6: every expert is its layer's dense MLP.
    dense = read(dense_checkpoint).params
    sparse = read(Path(model_dir) / "checkpoint_1").params
    for stack in ("encoder", "decoder"):
        dense_mlp = dense[stack]["layers_1"]["mlp"]
        experts = sparse[stack]["layers_1"]["mlp"]["expert"]
        for name, weights in dense_mlp.items():
            np.testing.assert_allclose(
                experts[name]["kernel"],
                np.broadcast_to(weights["kernel"], (NUM_EXPERTS, *weights["kernel"].shape)),
                atol=1e-6,
            )
        np.testing.assert_allclose(
            sparse[stack]["layers_0"]["mlp"]["wo"]["kernel"],
            dense[stack]["layers_0"]["mlp"]["wo"]["kernel"],
            atol=1e-6,
        )
