"""Model FLOPs per training step and model FLOPs utilisation (MFU).

MFU = model FLOPs of one step / (step time x peak FLOP/s of one device x devices). "Model"
FLOPs count the matrix multiplications the architecture needs for the batch, 2 FLOPs per
multiply-add, whatever the implementation recomputes (remat) or skips; elementwise work (norms,
activations, softmax) is left out, as in PaLM's appendix B and T5X/MaxText practice.

Per step, with a forward pass and a backward pass that costs two forwards (hence 6 = 3 x 2):

    model_flops = 6 x (matmul parameters each position passes through) x positions
                + 12 x layers x (heads x head_dim) x query_length x key_length x batch

summed over the stacks:

- encoder, per input position:  4 E I (q, k, v, out) + (A + 1) E M (wi_*, wo) per layer;
- decoder, per target position: 4 E I self-attention, + 2 E I cross-attention (q, out),
  + (A + 1) E M per layer, and E V for the output logits;
- cross-attention keys/values:  2 E I per layer per *input* position (they read the encoder);
- attention scores (q k^T and weights x v): encoder S x S, decoder self T x T, cross T x S.

E = emb_dim, I = num_heads x head_dim, M = mlp_dim, A = number of mlp_activations, V = vocab.
Positions are those of the padded batch shape (the device computes them all), and the causal
T x T is counted whole (what the kernels compute). The embedding lookup is a gather: 0 FLOPs.
A decoder-only model is the decoder stack over its decoder length without cross-attention.
"""

from __future__ import annotations

import jax

from t5forge.errors import ConfigError
from t5forge.models.configs import T5Config

# Dense (no sparsity) peak FLOP/s of ONE jax device, by compute dtype. "float32" is the rate a
# float32 matmul runs at under jax's default precision: TF32 tensor cores on NVIDIA Ampere and
# later, one bfloat16 pass on TPUs (so the bfloat16 figure there).
# Sources: NVIDIA A100/H100/H200 datasheets (SXM), Google Cloud TPU system architecture pages.
PEAK_FLOPS_PER_DEVICE = {
    "NVIDIA H100 PCIe": {"bfloat16": 756e12, "float32": 378e12},
    "NVIDIA H100 NVL": {"bfloat16": 835e12, "float32": 418e12},
    "NVIDIA H100": {"bfloat16": 989e12, "float32": 495e12},  # SXM / HBM3
    "NVIDIA H200": {"bfloat16": 989e12, "float32": 495e12},
    "NVIDIA A100": {"bfloat16": 312e12, "float32": 156e12},
    "NVIDIA L4": {"bfloat16": 121e12, "float32": 60e12},
    "TPU v3": {"bfloat16": 61.5e12, "float32": 61.5e12},  # one TensorCore (a v3 jax device)
    "TPU v4": {"bfloat16": 275e12, "float32": 275e12},
    "TPU v5 lite": {"bfloat16": 197e12, "float32": 197e12},  # v5e
    "TPU v5": {"bfloat16": 459e12, "float32": 459e12},  # v5p reports itself as 'TPU v5'
    "TPU v6 lite": {"bfloat16": 918e12, "float32": 918e12},  # v6e (Trillium)
}


def _per_position_matmul_params(config: T5Config) -> tuple[int, int, int]:
    """(encoder, decoder, cross-attention key/value) matmul parameters touched per position."""
    emb, inner = config.emb_dim, config.num_heads * config.head_dim
    mlp = (len(config.mlp_activations) + 1) * emb * config.mlp_dim
    encoder = config.num_encoder_layers * (4 * emb * inner + mlp)
    cross = 0 if config.is_decoder_only else 2 * emb * inner
    decoder = config.num_decoder_layers * (4 * emb * inner + cross + mlp)
    decoder += emb * config.vocab_size
    cross_key_value = 0 if config.is_decoder_only else config.num_decoder_layers * 2 * emb * inner
    return encoder, decoder, cross_key_value


def model_flops_per_step(
    config: T5Config, batch_size: int, input_length: int, target_length: int, training: bool = True
) -> float:
    """Model FLOPs of one step over a [batch_size, input_length / target_length] batch.

    For a decoder-only model `target_length` is the decoder length and `input_length` must be
    0. `training=False` gives the forward pass alone (a third of a training step).
    """
    for name, value in (("batch_size", batch_size), ("target_length", target_length)):
        if value <= 0:
            raise ConfigError(f"model_flops_per_step needs a positive {name}, got {value}")
    if config.is_decoder_only and input_length:
        raise ConfigError(
            "a decoder_only model has no inputs: pass input_length=0 and the "
            "decoder length as target_length"
        )
    if not config.is_decoder_only and input_length <= 0:
        raise ConfigError(
            f"an encoder_decoder model needs a positive input_length, got {input_length}"
        )
    encoder, decoder, cross_key_value = _per_position_matmul_params(config)
    multiply_adds = (encoder + cross_key_value) * input_length + decoder * target_length
    inner = config.num_heads * config.head_dim
    score_pairs = (
        config.num_encoder_layers * input_length * input_length
        + config.num_decoder_layers * target_length * target_length
    )
    if not config.is_decoder_only:
        score_pairs += config.num_decoder_layers * target_length * input_length
    multiply_adds += 2 * inner * score_pairs  # q k^T and weights x v
    forward = 2.0 * multiply_adds * batch_size
    return 3.0 * forward if training else forward


def peak_flops_per_device(device_kind: str, dtype: str) -> float | None:
    """Peak dense FLOP/s of one device called `device_kind` (jax's Device.device_kind) in
    `dtype`; None where it is unknown (CPUs, unlisted accelerators)."""
    # Longest names first: 'NVIDIA H100 PCIe' before 'NVIDIA H100', 'TPU v5 lite' before 'TPU v5'.
    for name in sorted(PEAK_FLOPS_PER_DEVICE, key=len, reverse=True):
        if device_kind.startswith(name):
            return PEAK_FLOPS_PER_DEVICE[name].get(dtype)
    return None


def local_peak_flops(dtype: str) -> float | None:
    """peak_flops_per_device for jax's default device (None on CPU)."""
    return peak_flops_per_device(jax.devices()[0].device_kind, dtype)


def mfu(
    model_flops: float, step_seconds: float, peak_flops: float | None, num_devices: int = 1
) -> float | None:
    """model_flops / (step_seconds x peak_flops x num_devices); None when the peak is unknown."""
    if step_seconds <= 0 or num_devices <= 0:
        raise ConfigError(
            f"mfu needs a positive step time and device count, got "
            f"{step_seconds} s on {num_devices} devices"
        )
    if peak_flops is None:
        return None
    return model_flops / (step_seconds * peak_flops * num_devices)
