"""Mesh TF import: the name mapping on plain dicts (no TensorFlow), and a real TF checkpoint
written with TensorFlow's own saver when the optional extra is installed."""

import importlib.util

import jax
import numpy as np
import pytest

from t5forge.errors import CheckpointError
from t5forge.interop import mesh_tf, t5x

HAS_TENSORFLOW = importlib.util.find_spec("tensorflow") is not None


@pytest.fixture(scope="module")
def tiny_params(shared_data):
    params, _, _ = t5x.load_t5x_checkpoint(
        shared_data / "t5x_testdata" / "test_t5_tiny.checkpoint_0"
    )
    rng = np.random.default_rng(0)  # distinct values, so a swapped name cannot pass
    return jax.tree.map(lambda x: rng.standard_normal(x.shape).astype(np.float32), params)


def _mesh_tf_variables(params, stack_names=("encoder", "decoder")):
    """The tiny T5's params under the names the original T5 releases use."""
    enc_name, dec_name = stack_names
    out = {"shared/embedding": params["token_embedder"]["embedding"], "global_step": np.int64(1000)}
    subs = {
        "encoder": [
            ("SelfAttention", "attention", "pre_attention_layer_norm"),
            ("DenseReluDense", "mlp", "pre_mlp_layer_norm"),
        ],
        "decoder": [
            ("SelfAttention", "self_attention", "pre_self_attention_layer_norm"),
            ("EncDecAttention", "encoder_decoder_attention", "pre_cross_attention_layer_norm"),
            ("DenseReluDense", "mlp", "pre_mlp_layer_norm"),
        ],
    }
    for stack, tf_stack in (("encoder", enc_name), ("decoder", dec_name)):
        if stack not in params:
            continue
        tree = params[stack]
        out[f"{tf_stack}/block_000/layer_000/SelfAttention/relative_attention_bias"] = tree[
            "relpos_bias"
        ]["rel_embedding"]
        out[f"{tf_stack}/final_layer_norm/scale"] = tree[f"{stack}_norm"]["scale"]
        layers = sorted(k for k in tree if k.startswith("layers_"))
        sublayers = [s for s in subs[stack] if s[1] in tree["layers_0"]]
        for block, layer_name in enumerate(layers):
            layer = tree[layer_name]
            for index, (tf_module, module, norm) in enumerate(sublayers):
                prefix = f"{tf_stack}/block_{block:03d}/layer_{index:03d}"
                out[f"{prefix}/layer_norm/scale"] = layer[norm]["scale"]
                if tf_module == "DenseReluDense":
                    for name, kernel in layer["mlp"].items():
                        out[f"{prefix}/DenseReluDense/{name}/kernel"] = kernel["kernel"]
                        out[f"{prefix}/DenseReluDense/{name}/kernel_slot_vr"] = np.zeros(3)
                else:
                    for short, long in zip("qkvo", ("query", "key", "value", "out"), strict=True):
                        out[f"{prefix}/{tf_module}/{short}"] = layer[module][long]["kernel"]
                        out[f"{prefix}/{tf_module}/{short}_slot_vc"] = np.zeros(3)
    if "logits_dense" in params.get("decoder", {}):
        out[f"{dec_name}/logits/kernel"] = params["decoder"]["logits_dense"]["kernel"]
    return out


def _assert_trees_equal(actual, expected):
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(a, e)


def test_t5_1_1_names_map_to_t5x_params(tiny_params):
    params, step = mesh_tf.mesh_tf_variables_to_params(_mesh_tf_variables(tiny_params))
    assert step == 1000
    _assert_trees_equal(params, tiny_params)


def test_t5_1_0_relu_mlp_with_tied_logits(tiny_params):
    t5_1_0 = jax.tree.map(lambda x: x, tiny_params)
    del t5_1_0["decoder"]["logits_dense"]
    for stack in ("encoder", "decoder"):
        for name, layer in t5_1_0[stack].items():
            if name.startswith("layers_"):
                layer["mlp"] = {"wi": layer["mlp"]["wi_0"], "wo": layer["mlp"]["wo"]}
    params, _ = mesh_tf.mesh_tf_variables_to_params(_mesh_tf_variables(t5_1_0))
    _assert_trees_equal(params, t5_1_0)
    assert t5x.infer_config(params).mlp_activations == ("relu",)


def test_decoder_only_transformer_stack(tiny_params):
    decoder_only = {
        "token_embedder": tiny_params["token_embedder"],
        "decoder": {k: v for k, v in tiny_params["decoder"].items()},
    }
    for name, layer in list(decoder_only["decoder"].items()):
        if name.startswith("layers_"):
            decoder_only["decoder"][name] = {
                k: v
                for k, v in layer.items()
                if k not in ("encoder_decoder_attention", "pre_cross_attention_layer_norm")
            }
    variables = _mesh_tf_variables(decoder_only, stack_names=("encoder", "transformer"))
    assert "transformer/block_001/layer_001/layer_norm/scale" in variables
    params, _ = mesh_tf.mesh_tf_variables_to_params(variables)
    _assert_trees_equal(params, decoder_only)


def test_unknown_and_unsupported_variables_are_named(tiny_params):
    variables = _mesh_tf_variables(tiny_params)
    with pytest.raises(
        CheckpointError,
        match=r"1 Mesh TF variables have no t5forge name "
        r"\(e.g. encoder/block_000/adapter/kernel\)",
    ):
        mesh_tf.mesh_tf_variables_to_params(
            {**variables, "encoder/block_000/adapter/kernel": np.zeros(2)}
        )
    per_layer = "encoder/block_001/layer_000/SelfAttention/relative_attention_bias"
    with pytest.raises(CheckpointError, match="a relative attention bias per layer is not"):
        mesh_tf.mesh_tf_variables_to_params({**variables, per_layer: np.zeros((4, 32))})


def test_checkpoint_prefix_found_without_tensorflow(tmp_path):
    for step in (1000, 2000):
        (tmp_path / f"model.ckpt-{step}.index").write_bytes(b"")
        (tmp_path / f"model.ckpt-{step}.data-00000-of-00001").write_bytes(b"")
    assert mesh_tf.checkpoint_prefix(tmp_path) == str(tmp_path / "model.ckpt-2000")
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-1000"\n')
    assert mesh_tf.checkpoint_prefix(tmp_path) == str(tmp_path / "model.ckpt-1000")
    assert mesh_tf.checkpoint_prefix(tmp_path / "model.ckpt-2000.index") == str(
        tmp_path / "model.ckpt-2000"
    )
    assert mesh_tf.is_mesh_tf_checkpoint(tmp_path / "model.ckpt-2000")
    assert not mesh_tf.is_mesh_tf_checkpoint(tmp_path / "model.ckpt-3000")
    with pytest.raises(CheckpointError, match="is not a TensorFlow checkpoint"):
        mesh_tf.load_mesh_tf_checkpoint(tmp_path / "elsewhere")


def test_t5x_checkpoint_is_not_mistaken_for_tensorflow(shared_data):
    assert not mesh_tf.is_mesh_tf_checkpoint(
        shared_data / "t5x_testdata" / "tiny_t5" / "checkpoint_1"
    )


@pytest.mark.skipif(HAS_TENSORFLOW, reason="checks the message shown when TensorFlow is absent")
def test_reading_without_tensorflow_says_how_to_install(tmp_path):
    (tmp_path / "model.ckpt-5.index").write_bytes(b"")
    with pytest.raises(
        CheckpointError,
        match=r"needs TensorFlow; install it with "
        r"`pip install 't5forge\[tensorflow\]'`",
    ):
        mesh_tf.load_mesh_tf_checkpoint(tmp_path)


def test_real_tensorflow_checkpoint(tiny_params, tmp_path):
    tf = pytest.importorskip(
        "tensorflow",
        reason="Mesh TF checkpoints are written and read "
        "with the optional `tensorflow` extra, not installed here",
    )
    variables = _mesh_tf_variables(tiny_params)
    with tf.Graph().as_default():
        tf_vars = [tf.compat.v1.Variable(value, name=name) for name, value in variables.items()]
        saver = tf.compat.v1.train.Saver(tf_vars)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(tmp_path / "model.ckpt"), global_step=1000)
    params, step = mesh_tf.load_mesh_tf_checkpoint(tmp_path)
    assert step == 1000
    _assert_trees_equal(params, tiny_params)
