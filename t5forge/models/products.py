"""The matrix products of a T5 network, in one place.

Every Dense projection goes through `dense_product` and every attention product through
`einsum_product`, so how a product is computed (which dtypes it multiplies and accumulates
in, and how its gradient is formed) is decided here once for the whole network.

In float32 a product is the plain `dot_general` / `einsum` (a Dense product's backward on CPU
aside, below). In bfloat16 it takes the forms
XLA:CPU runs fast (docs/cpu-products.md has the measurements): bfloat16 operands accumulated
in float32 (`preferred_element_type=float32`, which XLA hands to YNNPACK) and cast back, where
a bfloat16-output dot is converted to float32 and multiplied there at a third of the speed.
JAX's transpose of that form would multiply a float32 cotangent by a bfloat16 operand (a
float32 product again), so the backward pass is written out (`jax.custom_vjp`) in the same
fast form, the weight gradient through `bf16_weight_gradient`. Elsewhere (GPUs, TPUs) XLA's
own bfloat16 dots already accumulate in float32, and the products stay the plain ones.

In float32 on CPU a widening Dense product's backward is written out too: JAX's transpose
leaves XLA to contract the cotangent and the input over their leading axes, and XLA does it by
copying the cotangent transposed (for T5's logits a [vocab, tokens] float32 copy, 117 MB at
batch 8 x 114) where a transposed copy of the input (1.8 MB) does;
`transposed_weight_gradient` makes that copy (the logits layer's forward and backward 1.7x
faster on an Intel Xeon, docs/cpu-products.md). The forward is the plain dot; the gradients
are the same sums, in another order.
"""

from __future__ import annotations

import functools
import math
import os

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from t5forge.models import native_products
from t5forge.models.quantized import Int8Kernel, int8_product
from t5forge.models.transposed import TransposedKernel, transposed_product

BFLOAT16 = jnp.dtype(jnp.bfloat16)
FLOAT32 = jnp.dtype(jnp.float32)
# The names of the bfloat16 products' outputs. A custom_vjp hides its dot from jax's dots
# policies (`checkpoint_dots_with_no_batch_dims`, `dots_saveable`), so a remat policy that
# keeps dots must keep these names too to keep the bfloat16 products.
DENSE_PRODUCT = "dense_product"
EINSUM_PRODUCT = "einsum_product"
# The environment variable that, set to 0, turns the fast forms off (the plain bfloat16 and
# float32 dots, differentiated by JAX, as before them): how their numerics are compared.
FAST_PRODUCTS_SWITCH = "T5FORGE_FAST_PRODUCTS"


def dense_product(x, kernel, dtype):
    """x [..., in] @ kernel [in, ...] in `dtype`, or in the kernel's dtype where it is stored
    narrower (bfloat16 weights loaded for inference, `t5forge.load(weights_dtype=...)`):
    multiplying in bfloat16 reads half the bytes, and the result still comes out in `dtype`.
    An int8 kernel (`weights_dtype='int8'`) multiplies in int8 (quantized.int8_product), a
    bfloat16 one stored transposed at load from that layout (transposed.py).
    """
    if isinstance(kernel, Int8Kernel):
        return int8_product(x, kernel, dtype)
    if isinstance(kernel, TransposedKernel):
        return transposed_product(x, kernel, dtype)
    dtype = jnp.dtype(dtype)
    compute = dtype
    if jnp.finfo(kernel.dtype).bits < jnp.finfo(dtype).bits:
        compute = jnp.dtype(kernel.dtype)
    if fast_forms_apply(compute):
        product = _bf16_dense(x.astype(BFLOAT16), kernel.astype(BFLOAT16), dtype)
        return checkpoint_name(product, DENSE_PRODUCT)
    if _explicit_float32_backward(kernel, compute, dtype):
        return checkpoint_name(_f32_dense(x.astype(FLOAT32), kernel.astype(FLOAT32)), DENSE_PRODUCT)
    return jax.lax.dot_general(
        x.astype(compute),
        kernel.astype(compute),
        (((x.ndim - 1,), (0,)), ((), ())),
        preferred_element_type=dtype,
    )


def einsum_product(spec: str, a, b, dtype):
    """The two-operand einsum `spec` of a and b (attention's products), with the result in
    `dtype` (float32 logits from bfloat16 queries and keys, say). Every axis of an operand
    appears in the other operand or in the result, as in any product."""
    dtype = jnp.dtype(dtype)
    if a.dtype == b.dtype and fast_forms_apply(a.dtype):
        return checkpoint_name(_bf16_einsum(spec, a, b, dtype), EINSUM_PRODUCT)
    return jnp.einsum(spec, a, b, preferred_element_type=dtype)


def fast_forms_apply(compute_dtype) -> bool:
    """Whether a product multiplying in `compute_dtype` takes the fast forms: bfloat16 on CPU,
    unless `T5FORGE_FAST_PRODUCTS=0` asks for the plain bfloat16 dots (read when a program is
    traced; benchmarks/bf16_loss_curve.py compares the two). The MLP's activation follows the
    same switch (layers.MlpBlock: XLA:CPU runs bfloat16 elementwise math through converts)."""
    if os.environ.get(FAST_PRODUCTS_SWITCH, "1") == "0":
        return False
    return jnp.dtype(compute_dtype) == BFLOAT16 and jax.default_backend() == "cpu"


def _explicit_float32_backward(kernel, compute_dtype, dtype) -> bool:
    """Whether a float32 Dense product takes `_f32_dense`'s backward: on CPU, for a kernel
    whose outputs outnumber its inputs (so the cotangent XLA would copy transposed is larger
    than the input: T5's logits, the fused q/k/v and wi projections), unless
    `T5FORGE_FAST_PRODUCTS=0` asks for the plain dot that JAX differentiates."""
    if os.environ.get(FAST_PRODUCTS_SWITCH, "1") == "0":
        return False
    both = (jnp.dtype(compute_dtype), jnp.dtype(dtype))
    wider = math.prod(kernel.shape[1:]) > kernel.shape[0]
    return both == (FLOAT32, FLOAT32) and wider and jax.default_backend() == "cpu"


def transposed_weight_gradient(x, grad):
    """x^T @ grad over the leading axes both share ([..., in] and [..., out...]): float32 [in,
    out...], as one plain [in, tokens] @ [tokens, out] product on a transposed copy of x. The
    copy goes behind an optimization barrier with a unit axis, or XLA folds the transpose back
    into the dot and copies grad transposed instead (the larger operand, for most layers)."""
    lead = x.ndim - 1
    transposed = jax.lax.optimization_barrier(jnp.moveaxis(x, -1, 0)[..., None])[..., 0]
    return jax.lax.dot_general(
        transposed,
        grad,
        ((tuple(range(1, lead + 1)), tuple(range(lead))), ((), ())),
        preferred_element_type=FLOAT32,
    )


def _grad_of_input(grad, kernel, dtype):
    """grad [..., out...] @ kernel [in, out...]^T: the Dense input's gradient, summed in float32."""
    outputs = kernel.ndim - 1
    return jax.lax.dot_general(
        grad,
        kernel,
        ((tuple(range(grad.ndim - outputs, grad.ndim)), tuple(range(1, kernel.ndim))), ((), ())),
        preferred_element_type=FLOAT32,
    ).astype(dtype)


@jax.custom_vjp
def _f32_dense(x, kernel):
    """dense_product of float32 x and kernel on CPU: the plain dot, its weight gradient made
    from a transposed copy of x (transposed_weight_gradient)."""
    return jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())))


def _f32_dense_forward(x, kernel):
    return _f32_dense(x, kernel), (x, kernel)


def _f32_dense_backward(residuals, grad):
    x, kernel = residuals
    return _grad_of_input(grad, kernel, FLOAT32), transposed_weight_gradient(x, grad)


_f32_dense.defvjp(_f32_dense_forward, _f32_dense_backward)


def bf16_weight_gradient(x, grad):
    """x^T @ grad over the leading axes both share, for bfloat16 x [..., in] and grad
    [..., out...]: float32 [in, out...] (a Dense kernel's gradient).

    XLA:CPU's own form contracts both operands' leading axes, and it runs that dot in
    float32, converting both operands first. Where oneDNN multiplies bfloat16 on this CPU
    (`native_products.bf16_products_here`) and the program runs on one device, it multiplies
    x as [tokens, in] by grad as [tokens, columns] in one call, no transpose made
    (`native_products.bf16_matmul`; the custom call has no sharding rule, so a sharded program
    keeps XLA's form). Otherwise a transposed copy of x makes it a plain [in, tokens] @
    [tokens, out] product that stays bfloat16 (transposed_weight_gradient).
    """
    lead = x.ndim - 1
    if native_products.bf16_products_here():
        tokens = math.prod(x.shape[:lead])
        product = native_products.bf16_matmul(
            x.reshape(tokens, x.shape[-1]),
            grad.reshape(tokens, -1),
            contract_a=0,
            contract_b=0,
            out_dtype=FLOAT32,
        )
        return product.reshape(x.shape[-1], *grad.shape[lead:])
    return transposed_weight_gradient(x, grad)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _bf16_dense(x, kernel, dtype):
    """dense_product of bfloat16 x and kernel, in the fast forms forward and backward."""
    return jax.lax.dot_general(
        x, kernel, (((x.ndim - 1,), (0,)), ((), ())), preferred_element_type=FLOAT32
    ).astype(dtype)


def _bf16_dense_forward(x, kernel, dtype):
    return _bf16_dense(x, kernel, dtype), (x, kernel)


def _bf16_dense_backward(dtype, residuals, grad):
    x, kernel = residuals
    grad = grad.astype(BFLOAT16)
    return _grad_of_input(grad, kernel, BFLOAT16), bf16_weight_gradient(x, grad).astype(BFLOAT16)


_bf16_dense.defvjp(_bf16_dense_forward, _bf16_dense_backward)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 3))
def _bf16_einsum(spec, a, b, dtype):
    """einsum_product of bfloat16 operands, in the fast form forward and backward."""
    return _canonical_einsum(spec, a, b, dtype)


def _bf16_einsum_forward(spec, a, b, dtype):
    return _bf16_einsum(spec, a, b, dtype), (a, b)


def _bf16_einsum_backward(spec, dtype, residuals, grad):
    """Each operand's gradient is the einsum of the other operand with the result's
    gradient, onto the operand's axes."""
    a, b = residuals
    inputs, result = spec.split("->")
    a_axes, b_axes = inputs.split(",")
    grad = grad.astype(BFLOAT16)
    grad_a = _canonical_einsum(f"{result},{b_axes}->{a_axes}", grad, b, BFLOAT16)
    grad_b = _canonical_einsum(f"{a_axes},{result}->{b_axes}", a, grad, BFLOAT16)
    return grad_a, grad_b


_bf16_einsum.defvjp(_bf16_einsum_forward, _bf16_einsum_backward)


def _materialized(x, order):
    """x with its axes in `order` as a copy: a transpose XLA can fold neither into the dot
    before it nor into the dot after it (barriers on both sides, the unit axis as in
    bf16_weight_gradient); x itself where no axis moves."""
    if list(order) == list(range(x.ndim)):
        return x
    barrier = jax.lax.optimization_barrier
    return barrier(jnp.transpose(barrier(x), order)[..., None])[..., 0]


def _canonical_einsum(spec: str, a, b, dtype):
    """The einsum `spec` of bfloat16 a and b as one batched dot of [batch, rows, depth] by
    [batch, depth, columns] or [batch, columns, depth], accumulated in float32 and cast to
    `dtype`.

    Those are the forms XLA:CPU gives YNNPACK. Left to itself, XLA folds the operands'
    transposes into the dot, and a bfloat16 dot contracting a lhs axis other than its last
    then runs in float32 or, at some shapes, not at all ("Unsupported element type for
    DotThunk::Execute: BF16 x BF16 = F32", docs/cpu-products.md); so every transpose here is
    a copy, the result's too.
    """
    inputs, result = spec.split("->")
    a_axes, b_axes = inputs.split(",")
    batch = [axis for axis in a_axes if axis in b_axes and axis in result]
    depth = [axis for axis in a_axes if axis in b_axes and axis not in result]
    rows = [axis for axis in a_axes if axis not in b_axes]
    columns = [axis for axis in b_axes if axis not in a_axes]
    sizes = {**dict(zip(a_axes, a.shape)), **dict(zip(b_axes, b.shape))}
    size = lambda axes: math.prod(sizes[axis] for axis in axes)  # noqa: E731
    lhs = _materialized(a, [a_axes.index(axis) for axis in batch + rows + depth])
    lhs = lhs.reshape(size(batch), size(rows), size(depth))
    if [b_axes.index(axis) for axis in batch + depth + columns] == list(range(b.ndim)):
        rhs, rhs_depth = b.reshape(size(batch), size(depth), size(columns)), 1
    else:
        rhs = _materialized(b, [b_axes.index(axis) for axis in batch + columns + depth])
        rhs, rhs_depth = rhs.reshape(size(batch), size(columns), size(depth)), 2
    product = jax.lax.dot_general(
        lhs, rhs, (((2,), (rhs_depth,)), ((0,), (0,))), preferred_element_type=FLOAT32
    )
    computed = batch + rows + columns
    product = product.astype(dtype).reshape([sizes[axis] for axis in computed])
    return _materialized(product, [computed.index(axis) for axis in result])
