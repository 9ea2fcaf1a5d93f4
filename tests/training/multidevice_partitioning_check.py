"""Sharded training on 8 virtual CPU devices vs 1 device; prints a JSON report for the test.

Run as `XLA_FLAGS=--xla_force_host_platform_device_count=8 python <this file>` (the test in
test_partitioning.py does). For each layout (1 device, 4 data x 2 model, FSDP on the same mesh)
and optimizer (SGD, Adafactor) it creates the train state already sharded, runs three jitted
steps on a tiny embedding + MLP model, and reports losses and where the arrays landed.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec
from multidevice_layouts import eight_device_layouts, partition_specs

from t5forge.training import partitioning
from t5forge.training.optimizers import adafactor
from t5forge.training.train_state import TrainState, train_state_logical_axes

VOCAB, EMBED, MLP, BATCH, LENGTH = 64, 16, 32, 8, 4
PARAM_AXES = {
    "token_embedder": {"embedding": ("vocab", "embed")},
    "mlp": {"wi": {"kernel": ("embed", "mlp")}, "wo": {"kernel": ("mlp", "embed")}},
    "final_norm": {"scale": ("embed",)},
}


def init_params(rng):
    k1, k2, k3 = jax.random.split(rng, 3)
    return {
        "token_embedder": {"embedding": jax.random.normal(k1, (VOCAB, EMBED))},
        "mlp": {
            "wi": {"kernel": 0.3 * jax.random.normal(k2, (EMBED, MLP))},
            "wo": {"kernel": 0.3 * jax.random.normal(k3, (MLP, EMBED))},
        },
        "final_norm": {"scale": jnp.ones((EMBED,))},
    }


def loss_fn(params, batch):
    embedding = params["token_embedder"]["embedding"]
    x = embedding[batch["inputs"]] * params["final_norm"]["scale"]
    x = x + jax.nn.relu(x @ params["mlp"]["wi"]["kernel"]) @ params["mlp"]["wo"]["kernel"]
    logits = x @ embedding.T
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"]).mean()


def run(mesh, rules, tx, batches):
    def make_state(rng):
        return TrainState.create(init_params(rng), tx)

    state, shardings = partitioning.create_sharded(
        make_state,
        lambda abstract: train_state_logical_axes(abstract, PARAM_AXES),
        mesh,
        rules,
        jax.random.PRNGKey(0),
    )

    def train_step(state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(state.params, batch)
        return state.apply_gradients(grads, tx), loss

    batch_shardings = {k: partitioning.batch_sharding(mesh) for k in batches[0]}
    step = jax.jit(
        train_step,
        in_shardings=(shardings, batch_shardings),
        out_shardings=(shardings, NamedSharding(mesh, PartitionSpec())),
        donate_argnums=0,
    )
    losses = []
    for batch in batches:
        state, loss = step(state, partitioning.shard_batch(batch, mesh))
        losses.append(float(loss))
    flat = jax.tree_util.tree_flatten_with_path(state)[0]
    shard_shapes = {
        jax.tree_util.keystr(path): list(leaf.addressable_shards[0].data.shape)
        for path, leaf in flat
    }
    return {
        "losses": losses,
        "specs": partition_specs(state),
        "shard_shapes": shard_shapes,
        "compilations": step._cache_size(),
    }


def main():
    layouts = eight_device_layouts()
    rng = np.random.default_rng(0)
    batches = [
        {
            "inputs": rng.integers(0, VOCAB, (BATCH, LENGTH), dtype=np.int32),
            "targets": rng.integers(0, VOCAB, (BATCH, LENGTH), dtype=np.int32),
        }
        for _ in range(3)
    ]
    optimizers = {
        "sgd": optax.sgd(0.5),
        "adafactor": adafactor(0.1, min_dim_size_to_factor=8, param_logical_axes=PARAM_AXES),
    }
    report = {
        layout: {
            name: run(p.mesh, p.logical_axis_rules, tx, batches) for name, tx in optimizers.items()
        }
        for layout, p in layouts.items()
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
