"""The attention kernel behind every T5 attention layer, and which implementation runs it.

T5 attention is softmax(q k^T + bias) v with no 1/sqrt(head_dim) scaling (T5 folds it into the
query initializer), where `bias` is the relative position bias plus the padding / causal /
packing mask as an additive -1e10. Three implementations compute it (T5Config
`attention_implementation`):

- 'xla':      `jax.nn.dot_product_attention(implementation='xla')`, any platform and dtype;
- 'cudnn':    the same call with cuDNN's fused (flash) kernel: CUDA GPUs, bfloat16/float16;
- 'explicit': einsum, float32 softmax, einsum, written out. It is the one formulation that
              exposes the attention weights, so attention dropout (T5's fine-tuning default)
              always runs it, whatever was asked for.

'auto' (the default) picks cuDNN where it can run the shapes, the explicit form for
bfloat16 on CPU and XLA everywhere else; a single-query call (choose_implementation with
query_length 1) gets XLA, since a fused kernel has nothing to fuse there. On CPU in bfloat16
the explicit form's products are products.einsum_product's fast forms, forward and backward,
where jax's XLA implementation multiplies the weights by the values with a bfloat16 result
(a form XLA:CPU runs in float32 at a third of the speed, docs/cpu-products.md).
Decoding steps do not come here at all: `cached_attention` and `slot_attention` read the
cache where it lies. Inputs are heads-major ([batch, heads, length, head_dim], the layout of
the decoding cache); the output is [batch, length, heads, head_dim]. Logits are accumulated
and softmaxed in float32 whatever the compute dtype.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from t5forge.errors import ConfigError
from t5forge.models import native_attention
from t5forge.models.products import einsum_product

CUDNN_DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
# cuDNN's fused attention needs Ampere (8.0); head_dim up to 256 from Hopper (9.0), else 128.
CUDNN_MIN_COMPUTE_CAPABILITY = 8.0


@dataclasses.dataclass(frozen=True)
class Platform:
    """What the attention choice needs to know about the device it compiles for."""

    name: str  # jax's platform name: 'cpu', 'gpu', 'tpu'
    compute_capability: float | None = None  # CUDA GPUs only, e.g. 9.0 for an H100

    @classmethod
    def current(cls) -> Platform:
        """The platform of jax's default device."""
        device = jax.devices()[0]
        capability = getattr(device, "compute_capability", None)
        try:
            capability = float(capability) if capability is not None else None
        except ValueError:  # a ROCm gfx name: not a CUDA device, so no cuDNN
            capability = None
        return cls(device.platform, capability)


def cudnn_unsupported_reason(
    platform: Platform, dtype, head_dim: int, query_length: int, key_length: int
) -> str | None:
    """Why cuDNN's fused kernel cannot run this attention (None when it can)."""
    if platform.name != "gpu" or platform.compute_capability is None:
        return f"cuDNN attention needs a CUDA GPU, this is {platform.name!r}"
    if platform.compute_capability < CUDNN_MIN_COMPUTE_CAPABILITY:
        return (
            f"cuDNN attention needs compute capability >= {CUDNN_MIN_COMPUTE_CAPABILITY}, "
            f"this GPU has {platform.compute_capability}"
        )
    if jnp.dtype(dtype) not in CUDNN_DTYPES:
        return f"cuDNN attention computes in bfloat16 or float16, not {jnp.dtype(dtype).name}"
    max_head_dim = 256 if platform.compute_capability >= 9.0 else 128
    if head_dim % 8 or head_dim > max_head_dim:
        return (
            f"cuDNN attention needs head_dim a multiple of 8 up to {max_head_dim}, got {head_dim}"
        )
    if query_length % 2 or key_length % 2:
        # With a bias, cuDNN's backward pass wants even lengths.
        return f"cuDNN attention with a bias needs even lengths, got {query_length}x{key_length}"
    return None


def choose_implementation(
    requested: str, platform: Platform, dtype, head_dim: int, query_length: int, key_length: int
) -> str:
    """The implementation that runs: 'xla', 'cudnn' or 'explicit' (see the module docstring).

    A requested 'cudnn' falls back to XLA off CUDA GPUs (so a config trained on a GPU still
    runs on a laptop) and for single-position decoding steps, but is a ConfigError on a CUDA
    GPU whose cuDNN cannot run the config's shapes or dtype.
    """
    if requested in ("xla", "explicit"):
        return requested
    if query_length == 1:
        return "xla"
    if requested == "auto" and platform.name == "cpu" and jnp.dtype(dtype) == jnp.bfloat16:
        return "explicit"
    reason = cudnn_unsupported_reason(platform, dtype, head_dim, query_length, key_length)
    if reason is None:
        return "cudnn"
    if requested == "cudnn" and platform.compute_capability is not None:
        raise ConfigError(
            f"T5Config.attention_implementation='cudnn' cannot run here: "
            f"{reason}; use 'auto' to fall back to XLA"
        )
    return "xla"


def soft_cap(logits, cap: float | None):
    """cap * tanh(logits / cap) (Gemma's logit soft-capping); the logits as they are without cap."""
    if cap is None:
        return logits
    return jnp.tanh(logits / cap) * cap


def explicit_attention(query, key, value, bias, dropout=None, softcap=None, with_lse=False):
    """softmax(cap(q k^T) + bias) v written out; `dropout` (a callable) applies to the weights.

    `with_lse` also returns the logits' log-sum-exp [b, q, h] (see merge_attention_parts).
    """
    logits = einsum_product("bhqd,bhkd->bhqk", query, key, jnp.float32)
    logits = soft_cap(logits, softcap)
    if bias is not None:
        logits = logits + bias.astype(jnp.float32)
    weights = jax.nn.softmax(logits).astype(value.dtype)
    if dropout is not None:
        weights = dropout(weights)
    context = einsum_product("bhqk,bhkd->bqhd", weights, value, value.dtype)
    if with_lse:
        return context, jax.nn.logsumexp(logits, axis=-1).transpose(0, 2, 1)
    return context


def merge_attention_parts(parts):
    """One softmax over several key sets from each set's own attention: [(context [N, q, H,
    D], log-sum-exp [N, q, H]), ...] -> the context of attending to all their keys at once
    (T5Gemma 2's decoder attends to its own positions and the encoder's in one softmax)."""
    top = functools.reduce(jnp.maximum, [lse for _, lse in parts])
    weights = [jnp.exp(lse - top)[..., None] for _, lse in parts]
    total = functools.reduce(jnp.add, weights)
    merged = functools.reduce(
        jnp.add, [w * context.astype(jnp.float32) for w, (context, _) in zip(weights, parts)]
    )
    return (merged / total).astype(parts[0][0].dtype)


def cached_attention(query, key, value, bias, softcap=None, with_lse=False):
    """Attention of decoding queries [B, H, q, D] over a heads-major cache [B, H, k, D].

    What one decoding step runs: q is 1, or the number of decodes (beams, samples) sharing
    one input's encoder memory. The cache is read as it lies (a fused kernel's layout would
    transpose it every step). With q > 1, batch and heads are folded into one batch axis:
    XLA:CPU runs that dot about 3x faster than the same einsum with two batch axes, while at
    q = 1 the einsum is as fast. Returns [B, q, H, D]; float32 logits and softmax (and the
    log-sum-exp [B, q, H] `with_lse`). Where the compiled decode attention runs, it does this
    (native_attention).
    """
    if native_attention.runs_here(query, key, value, 1, softcap, with_lse):
        return native_attention.decode_attention(
            query, key, value, None if bias is None else bias[:, None]
        )
    if query.shape[2] == 1:
        return explicit_attention(query, key, value, bias, softcap=softcap, with_lse=with_lse)
    batch, heads, queries, head_dim = query.shape
    flat = (batch * heads, -1, head_dim)
    logits = einsum_product(
        "bqd,bkd->bqk", query.reshape(flat), key.reshape(flat), jnp.float32
    ).reshape(batch, heads, queries, -1)
    logits = soft_cap(logits, softcap)
    if bias is not None:
        logits = logits + bias.astype(jnp.float32)
    weights = jax.nn.softmax(logits).astype(value.dtype)
    context = einsum_product(
        "bqk,bkd->bqd",
        weights.reshape(batch * heads, queries, -1),
        value.reshape(flat),
        value.dtype,
    )
    context = context.reshape(batch, heads, queries, head_dim).transpose(0, 2, 1, 3)
    if with_lse:
        return context, jax.nn.logsumexp(logits, axis=-1).transpose(0, 2, 1)
    return context


def slot_attention(query, key, value, bias, softcap=None, with_lse=False):
    """One decoding step's self-attention when each position may lie in another row's cache.

    query [G, H, R, D] holds the R decodes of each of G inputs; key/value [G * S, H, L, D] the
    S = bias.shape[1] cache rows of each input; bias [G or 1, S, H or 1, R or 1, L] lets each
    decode see, at each position, only the row that wrote it (under beam search, the beam it
    descends from: decoding.DecodingCache.lineage), so beams need not copy their caches when
    they reorder. Every decode is scored against all S rows of its input (S times the work
    of cached_attention's dots, which are small next to the step's projections) and the
    softmax runs over rows and positions together. With S = 1 every row reads its own cache:
    that is cached_attention. Returns [G, R, H, D]; float32 logits and softmax (and the
    log-sum-exp [G, R, H] `with_lse`). Where the compiled decode attention runs, it does this
    (native_attention).
    """
    if native_attention.runs_here(query, key, value, bias.shape[1], softcap, with_lse):
        return native_attention.decode_attention(query, key, value, bias)
    slots = bias.shape[1]
    if slots == 1:
        return cached_attention(query, key, value, bias[:, 0], softcap, with_lse)
    groups, heads, queries, head_dim = query.shape
    length = key.shape[2]
    flat = (groups * slots * heads, -1, head_dim)
    query = jnp.broadcast_to(query[:, None], (groups, slots, heads, queries, head_dim))
    logits = einsum_product(
        "bqd,bkd->bqk", query.reshape(flat), key.reshape(flat), jnp.float32
    ).reshape(groups, slots, heads, queries, length)
    logits = soft_cap(logits, softcap) + bias.astype(jnp.float32)
    weights = jax.nn.softmax(logits, axis=(1, 4))
    context = einsum_product(
        "bqk,bkd->bqd",
        weights.astype(value.dtype).reshape(groups * slots * heads, queries, length),
        value.reshape(flat),
        jnp.float32,
    ).reshape(groups, slots, heads, queries, head_dim)
    context = jnp.sum(context, axis=1).astype(value.dtype).transpose(0, 2, 1, 3)
    if with_lse:
        return context, jax.nn.logsumexp(logits, axis=(1, 4)).transpose(0, 2, 1)
    return context


def attend(
    query,
    key,
    value,
    bias,
    implementation: str = "auto",
    dropout=None,
    platform: Platform | None = None,
    softcap: float | None = None,
):
    """Attention of query [B, H, q, D] over key/value [B, H, k, D] plus bias [., ., q, k].

    Returns the context [B, q, H, D] in the value dtype. `dropout`, when given, is applied to
    the attention weights, and `softcap` to the logits; either forces the explicit formulation
    (jax's fused kernels cap nothing).
    """
    if dropout is not None or softcap is not None:
        return explicit_attention(query, key, value, bias, dropout, softcap)
    chosen = choose_implementation(
        implementation,
        platform or Platform.current(),
        query.dtype,
        query.shape[-1],
        query.shape[2],
        key.shape[2],
    )
    if chosen == "explicit":
        return explicit_attention(query, key, value, bias)
    if bias is not None:
        # XLA adds a float32 bias to float32 logits; cuDNN takes the bias in the input dtype.
        bias = bias.astype(jnp.float32 if chosen == "xla" else query.dtype)
    sequence_major = (0, 2, 1, 3)  # jax.nn wants [B, length, heads, D]; XLA folds the transposes
    return jax.nn.dot_product_attention(
        query.transpose(sequence_major),
        key.transpose(sequence_major),
        value.transpose(sequence_major),
        bias=bias,
        scale=1.0,
        implementation=chosen,
    )
