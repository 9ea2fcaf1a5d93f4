"""The compiled products on 8 virtual CPU devices (run by test_native_products.py through
commands.eight_device_report): per-device calls inside shard_map (a data-parallel forward, a
weight gradient summed over devices, int8 with packed weights) and a plain jit over sharded
operands. Prints the largest difference from XLA's dot of each as JSON."""

import json

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from t5forge.models import native_products


def main():
    mesh = jax.make_mesh((8,), ("data",))
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((16, 24)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((24, 5)), jnp.bfloat16)
    g = jnp.asarray(rng.standard_normal((16, 5)), jnp.bfloat16)
    x_q = jnp.asarray(rng.integers(-128, 128, (16, 24)), jnp.int8)
    w_q = jnp.asarray(rng.integers(-128, 128, (24, 5)), jnp.int8)
    scales = jnp.ones((16,), jnp.float32), jnp.ones((5,), jnp.float32)

    def put(value, spec):
        return jax.device_put(value, NamedSharding(mesh, spec))

    def per_device(fn, in_specs, out_specs):
        return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs))

    def bf16(a, b, contract_a, contract_b):
        return native_products.bf16_matmul(
            a, b, contract_a=contract_a, contract_b=contract_b, out_dtype=jnp.float32
        )

    forward = per_device(lambda x, w: bf16(x, w, 1, 0), (P("data"), P()), P("data"))
    weight_gradient = per_device(
        lambda x, g: jax.lax.psum(bf16(x, g, 0, 0), "data"), (P("data"), P("data")), P()
    )
    packed = native_products.pack_int8_weights(w_q)
    int8 = per_device(
        lambda x, xs, ws: native_products.int8_matmul(x, xs, packed, ws, jnp.float32),
        (P("data"), P("data"), P()),
        P("data"),
    )
    sharded_jit = jax.jit(lambda x, w: bf16(x, w, 1, 0))
    f32 = jnp.float32
    checks = {
        "shard_map forward": (
            forward(put(x, P("data")), put(w, P())),
            jnp.dot(x, w, preferred_element_type=f32),
        ),
        "shard_map weight gradient": (
            weight_gradient(put(x, P("data")), put(g, P("data"))),
            jnp.dot(x.T, g, preferred_element_type=f32),
        ),
        "shard_map int8 packed": (
            int8(put(x_q, P("data")), put(scales[0], P("data")), put(scales[1], P())),
            jnp.dot(x_q, w_q, preferred_element_type=jnp.int32).astype(f32),
        ),
        "jit over sharded operands": (
            sharded_jit(put(x, P("data")), put(w, P())),
            jnp.dot(x, w, preferred_element_type=f32),
        ),
    }
    print(
        json.dumps({name: float(jnp.abs(got - want).max()) for name, (got, want) in checks.items()})
    )


if __name__ == "__main__":
    main()
