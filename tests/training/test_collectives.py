"""collectives.py reads the collectives of a program XLA really compiled (one CPU device keeps
a shard_map's all-reduce and all-gather; the 8-device ones are read in
test_expert_parallel_multidevice.py)."""

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from t5forge.training import collectives


def test_reads_kind_arrays_bytes_and_source_from_compiled_hlo():
    mesh = Mesh(jax.devices()[:1], ("devices",))

    def exchange(x):
        return jax.lax.psum(x, "devices"), jax.lax.all_gather(x, "devices", tiled=True)

    program = jax.jit(
        jax.shard_map(
            exchange,
            mesh=mesh,
            in_specs=P("devices"),
            out_specs=(P(), P()),
            check_vma=False,
        )
    )
    hlo = program.lower(jnp.ones((4, 3), jnp.float32)).compile().as_text()
    found = sorted(collectives.collectives(hlo), key=lambda c: c.kind)
    assert [(c.kind, c.arrays, c.bytes) for c in found] == [
        ("all-gather", ("f32[4,3]",), 48),
        ("all-reduce", ("f32[4,3]",), 48),
    ]
    assert "all_gather" in found[0].source
    assert collectives.summary(found) == {"all-gather": (1, 48), "all-reduce": (1, 48)}
