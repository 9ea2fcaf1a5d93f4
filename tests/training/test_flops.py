"""Model FLOPs per step against numbers worked out by hand, the peak table and MFU."""

import jax
import numpy as np
import pytest

from t5forge.errors import ConfigError
from t5forge.models.configs import T5Config
from t5forge.models.model import build_model
from t5forge.models.presets import get_config
from t5forge.training.flops import (
    local_peak_flops,
    mfu,
    model_flops_per_step,
    peak_flops_per_device,
)

# emb 8, 2 heads x 4 (inner 8), gated MLP 16, vocab 100, one layer per stack.
SMALL = dict(
    vocab_size=100,
    emb_dim=8,
    num_heads=2,
    head_dim=4,
    mlp_dim=16,
    mlp_activations=("gelu", "linear"),
    num_decoder_layers=1,
)


def test_encoder_decoder_flops_by_hand():
    config = T5Config(**SMALL, num_encoder_layers=1)
    # Per input position: q,k,v,out 4*8*8=256 + MLP 3*8*16=384, + cross k,v 2*8*8=128 -> 768.
    # Per target position: self 256 + cross q,out 128 + MLP 384 + logits 8*100=800 -> 1568.
    # Score pairs: encoder 10*10 + decoder 6*6 + cross 6*10 = 196, each 2*8 multiply-adds.
    per_sequence = 768 * 10 + 1568 * 6 + 196 * 16  # 20224 multiply-adds
    forward = 2 * per_sequence * 2  # 2 FLOPs each, batch 2
    assert model_flops_per_step(config, 2, 10, 6, training=False) == forward == 80896
    assert model_flops_per_step(config, 2, 10, 6) == 3 * forward


def test_decoder_only_flops_by_hand():
    config = T5Config(**SMALL, num_encoder_layers=0, architecture="decoder_only")
    # Per position: 256 + 384 + logits 800 = 1440; scores 6*6 pairs of 16 multiply-adds.
    per_sequence = 1440 * 6 + 36 * 16  # 9216
    assert model_flops_per_step(config, 2, 0, 6) == 3 * 2 * per_sequence * 2 == 110592


@pytest.mark.parametrize("preset", ["t5_1_1/small", "t5_1_0/small", "decoder_only/small"])
def test_matmul_term_is_six_n_tokens_over_the_real_kernels(preset):
    """With attention left out (length 1), FLOPs are 6 x kernel params x positions: every
    kernel of the built network is touched once per position of its stack."""
    config = get_config(preset)
    kernels = {
        jax.tree_util.keystr(path): leaf.size
        for path, leaf in jax.tree_util.tree_leaves_with_path(build_model(config).abstract_params())
        if jax.tree_util.keystr(path).endswith("['kernel']")
    }
    total = sum(kernels.values())
    if config.logits_via_embedding:  # T5 1.0's logits reuse the embedding as a kernel
        total += config.vocab_size * config.emb_dim
    inner = config.num_heads * config.head_dim
    attention = (
        12
        * inner
        * (
            config.num_encoder_layers
            + config.num_decoder_layers
            + (0 if config.is_decoder_only else config.num_decoder_layers)
        )
    )
    input_length = 0 if config.is_decoder_only else 1
    assert model_flops_per_step(config, 1, input_length, 1) == 6 * total + attention


def test_bad_shapes_are_config_errors():
    encdec = get_config("t5_1_1/tiny")
    with pytest.raises(ConfigError, match="positive batch_size"):
        model_flops_per_step(encdec, 0, 8, 8)
    with pytest.raises(ConfigError, match="needs a positive input_length"):
        model_flops_per_step(encdec, 1, 0, 8)
    with pytest.raises(ConfigError, match="decoder_only model has no inputs"):
        model_flops_per_step(get_config("decoder_only/tiny"), 1, 8, 8)


@pytest.mark.parametrize(
    "kind,dtype,peak",
    [
        ("NVIDIA H100 80GB HBM3", "bfloat16", 989e12),
        ("NVIDIA H100 80GB HBM3", "float32", 495e12),
        ("NVIDIA H100 PCIe", "bfloat16", 756e12),
        ("NVIDIA H200", "bfloat16", 989e12),
        ("NVIDIA A100-SXM4-40GB", "bfloat16", 312e12),
        ("NVIDIA A100 80GB PCIe", "float32", 156e12),
        ("TPU v4", "bfloat16", 275e12),
        ("TPU v5 lite", "bfloat16", 197e12),
        ("TPU v5", "bfloat16", 459e12),
        ("cpu", "float32", None),
        ("NVIDIA GeForce RTX 4090", "bfloat16", None),
    ],
)
def test_peak_flops_table(kind, dtype, peak):
    assert peak_flops_per_device(kind, dtype) == peak


def test_mfu_by_hand():
    # 989e12 FLOPs in 2 s on one H100 at 989e12 FLOP/s: half the peak.
    assert mfu(989e12, 2.0, 989e12) == pytest.approx(0.5)
    # The same work spread over 8 devices in 0.25 s: also half their combined peak.
    assert mfu(989e12, 0.25, 989e12, num_devices=8) == pytest.approx(0.5)
    assert mfu(1e12, 1.0, None) is None
    with pytest.raises(ConfigError, match="positive step time"):
        mfu(1e12, 0.0, 989e12)


def test_cpu_has_no_known_peak():
    if jax.devices()[0].platform != "cpu":
        pytest.skip("runs where jax computes on the CPU")
    assert local_peak_flops("float32") is None


@pytest.mark.parametrize("preset,input_length", [("t5_1_1/tiny", 64), ("decoder_only/tiny", 0)])
def test_formula_agrees_with_xla_own_count_of_a_training_step(preset, input_length):
    """XLA's cost analysis of the compiled gradient counts the same matmuls plus the
    elementwise work the formula leaves out (a few percent at these sizes)."""
    config = get_config(
        preset, dtype="float32", emb_dim=128, num_heads=4, head_dim=32, mlp_dim=256, vocab_size=512
    )
    model = build_model(config)
    targets = np.random.RandomState(0).randint(3, 512, (2, 32)).astype(np.int32)
    batch = {"decoder_target_tokens": targets, "decoder_input_tokens": targets}
    if input_length:
        batch["encoder_input_tokens"] = np.ones((2, input_length), np.int32)
    gradient = jax.jit(jax.grad(lambda p: model.loss_fn(p, batch)[0]))
    compiled = gradient.lower(model.abstract_params()).compile()
    xla_flops = compiled.cost_analysis()["flops"]
    ours = model_flops_per_step(config, 2, input_length, 32)
    assert ours <= xla_flops <= 1.05 * ours
