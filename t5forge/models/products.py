"""The matrix products of a T5 network, in one place.

Every Dense projection goes through `dense_product` and every attention product through
`einsum_product`, so how a product is computed (which dtypes it multiplies and accumulates
in, and how its gradient is formed) is decided here once for the whole network.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from t5forge.models.quantized import Int8Kernel, int8_product


def dense_product(x, kernel, dtype):
    """x [..., in] @ kernel [in, ...] in `dtype`, or in the kernel's dtype where it is stored
    narrower (bfloat16 weights loaded for inference, `t5forge.load(weights_dtype=...)`):
    multiplying in bfloat16 reads half the bytes, and the result still comes out in `dtype`.
    An int8 kernel (`weights_dtype='int8'`) multiplies in int8 (quantized.int8_product).
    """
    if isinstance(kernel, Int8Kernel):
        return int8_product(x, kernel, dtype)
    compute = jnp.dtype(dtype)
    if jnp.finfo(kernel.dtype).bits < jnp.finfo(dtype).bits:
        compute = kernel.dtype
    return jax.lax.dot_general(
        x.astype(compute),
        kernel.astype(compute),
        (((x.ndim - 1,), (0,)), ((), ())),
        preferred_element_type=dtype,
    )


def einsum_product(spec: str, a, b, dtype):
    """The two-operand einsum `spec` of a and b (attention's products), with the result in
    `dtype` (float32 logits from bfloat16 queries and keys, say)."""
    return jnp.einsum(spec, a, b, preferred_element_type=dtype)
