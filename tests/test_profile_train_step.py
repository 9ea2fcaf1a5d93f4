"""benchmarks/profile_train_step.py reads a real trace and a real optimized HLO module."""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from profile_train_step import hlo_ops, op_times, suspect_of  # noqa: E402


def _mlp(x, kernel):
    with jax.named_scope("mlp"):
        return jnp.tanh(x @ kernel) * 2.0


def test_every_traced_op_is_found_in_the_hlo_with_its_source_path(tmp_path):
    x = jnp.ones((64, 32), jnp.float32)
    kernel = jnp.ones((32, 48), jnp.float32)
    compiled = jax.jit(_mlp).lower(x, kernel).compile()
    ops = hlo_ops(compiled.as_text())
    call = jax.jit(_mlp)
    call(x, kernel).block_until_ready()
    with jax.profiler.trace(str(tmp_path)):
        for _ in range(3):
            call(x, kernel).block_until_ready()
    times = op_times(next(tmp_path.rglob("*.xplane.pb")), ops)
    # The product and the fused tanh * 2, each named with its shape and its source.
    assert len(times) == 2 and all(ns > 0 for ns in times.values())
    assert all(ops[op][0].startswith("f32[64,48]") for op in times)
    assert all("/mlp/" in ops[op][2] for op in times)
    assert any(ops[op][1] == "fusion/__ynn_fusion" for op in times)


def test_suspects_are_named_by_source_path_kind_and_vocabulary():
    logits = "jvp(EncoderDecoder)/EncoderDecoder.decode/decoder/decoder._logits/logits_dense/dot"
    assert suspect_of("f32[912,32128]", "fusion/__ynn_fusion", logits, 32128).startswith("logits")
    mlp = "transpose(jvp(EncoderDecoder))/EncoderDecoder.encode/encoder/layers_2/mlp/mul"
    assert suspect_of("bf16[4096,2048]", "fusion", mlp, 32128).startswith("MLP activation")
    assert suspect_of("f32[32128,912]", "fusion", "transpose(jvp())/add_any", 32128).startswith(
        "softmax cross-entropy"
    )
    assert suspect_of("f32[512,2048]", "custom-call", mlp.replace("mul", "ffi_call"), 32128) == (
        "weight gradients (oneDNN custom calls)"
    )
    assert suspect_of("pred[16,1004]", "fusion", "", 32128) == (
        "optimizer update and finiteness checks"
    )
    assert suspect_of("bf16[48,512,512]", "fusion", "", 32128) == (
        "layout copies around the products"
    )
