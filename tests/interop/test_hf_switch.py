"""Parity with Hugging Face `transformers` Switch Transformers (PyTorch), both directions.

Tiny random-weight Switch models with 4 experts: a 4-layer encoder with 2 sparse layers (1 and
3) and a 3-layer decoder with 1 (layer 1, where Flaxformer's 'mixed' layout would say 2), at an
expert capacity above every sequence length (nothing dropped) and at capacity 2 (tokens
dropped in every sequence of 7 or 9 tokens). Logits, the router losses, greedy and beam
tokens are compared with transformers' own.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import t5forge  # noqa: E402
from t5forge.errors import ConfigError  # noqa: E402
from t5forge.interop import hf_switch  # noqa: E402
from t5forge.interop import huggingface as hf  # noqa: E402
from t5forge.interop.t5x import infer_config, load_t5x_checkpoint  # noqa: E402
from t5forge.models.model import build_model  # noqa: E402
from t5forge.models.moe import router_losses  # noqa: E402
from t5forge.models.presets import get_config  # noqa: E402
from tests.interop.test_hf_t5gemma import assert_beams_match_up_to_t5x_rules  # noqa: E402
from tests.interop.test_huggingface import _hf_generate  # noqa: E402

VOCAB = 16
CAPACITIES = {"no_drops": 16, "drops": 2}
# Right-padded encoder inputs (EOS=1, odd lengths) and decoder targets.
ENCODER_INPUTS = np.array(
    [[5, 9, 3, 12, 7, 1, 0, 0, 0], [14, 3, 1, 0, 0, 0, 0, 0, 0], [8, 11, 15, 6, 4, 9, 13, 10, 1]],
    np.int32,
)
TARGETS = np.array([[6, 13, 1, 0, 0, 0, 0], [10, 15, 12, 11, 9, 8, 1], [3, 1, 0, 0, 0, 0, 0]])
# Every position a real token: where HF and T5X differ only in what a padding position
# computes (HF's padding queries attend to the real keys, T5X's to none), and both routers count
# padding positions in their losses, the losses are compared on unpadded rows.
FULL_INPUTS = np.array(
    [[5, 9, 3, 12, 7, 1, 2, 4, 6], [14, 3, 1, 5, 5, 5, 5, 6, 7], [8, 11, 15, 6, 4, 9, 13, 10, 1]],
    np.int32,
)
FULL_TARGETS = np.array([[6, 13, 1, 2, 3, 4, 5], [10, 15, 12, 11, 9, 8, 1], [3, 1, 4, 4, 4, 4, 4]])


def _hf_config(capacity: int):
    return transformers.SwitchTransformersConfig(
        vocab_size=VOCAB,
        d_model=12,
        d_kv=4,
        d_ff=20,
        num_layers=4,
        num_decoder_layers=3,
        num_heads=3,
        num_experts=4,
        num_sparse_encoder_layers=2,
        num_sparse_decoder_layers=1,
        expert_capacity=capacity,
        dropout_rate=0.0,
        router_z_loss_coef=0.25,
        router_aux_loss_coef=0.5,
        decoder_start_token_id=0,  # what google/switch-base-8's generation config says
    )


def _random_hf_model(capacity: int):
    torch.manual_seed(capacity)
    model = transformers.SwitchTransformersForConditionalGeneration(_hf_config(capacity)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    return model


@pytest.fixture(scope="module", params=list(CAPACITIES))
def converted(request, tmp_path_factory):
    """(HF model, t5forge Model loaded from the directory the HF model saved)."""
    model = _random_hf_model(CAPACITIES[request.param])
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path)
    return model, t5forge.load(path)


def _decoder_inputs(targets):
    return np.pad(targets, ((0, 0), (1, 0)))[:, :-1].astype(np.int32)


def _hf_outputs(model, encoder_inputs, targets):
    with torch.no_grad():
        return model(
            input_ids=torch.tensor(encoder_inputs, dtype=torch.long),
            attention_mask=torch.tensor(encoder_inputs > 0, dtype=torch.long),
            decoder_input_ids=torch.tensor(_decoder_inputs(targets), dtype=torch.long),
            output_router_logits=True,
        )


def _assert_logits_match(forge, model, encoder_inputs=ENCODER_INPUTS, targets=TARGETS):
    expected = _hf_outputs(model, encoder_inputs, targets).logits.numpy()
    ours = forge.logits(encoder_inputs, _decoder_inputs(targets))
    valid = targets > 0  # padded decoder positions compute nothing anyone reads
    np.testing.assert_allclose(ours[valid], expected[valid], atol=1e-4, rtol=0)


def _our_router_losses(forge, encoder_inputs, targets) -> dict:
    batch = {
        "encoder_input_tokens": jnp.asarray(encoder_inputs),
        "decoder_input_tokens": jnp.asarray(_decoder_inputs(targets)),
        "decoder_target_tokens": jnp.asarray(targets),
    }
    _, intermediates = jax.jit(build_model(forge.config)._forward)(forge.params, batch)
    return router_losses(intermediates, forge.config)


def test_config_reads_the_switch_layout(converted):
    _, forge = converted
    config = forge.config
    assert config.sparse_layers("encoder") == (False, True, False, True)
    assert config.sparse_layers("decoder") == (False, True, False)  # HF's rule, not 'mixed'
    assert config.routing_groups == "sequence" and config.num_selected_experts == 1
    assert (config.router_z_loss_factor, config.aux_loss_factor) == (0.25, 0.5)
    assert config.logits_via_embedding and config.logits_scaled
    assert hf_switch.config_from_hf(hf_switch.config_to_hf(config)) == config


def test_imported_logits_match_transformers(converted):
    model, forge = converted
    _assert_logits_match(forge, model)


def test_router_losses_equal_transformers(converted):
    model, forge = converted
    expected = _hf_outputs(model, FULL_INPUTS, FULL_TARGETS)
    ours = _our_router_losses(forge, FULL_INPUTS, FULL_TARGETS)
    for stack in ("encoder", "decoder"):
        for name, hf_name in (("router_z_loss", "z_loss"), ("auxiliary_loss", "aux_loss")):
            np.testing.assert_allclose(
                ours[f"{stack}/{name}"], float(getattr(expected, f"{stack}_{hf_name}")), rtol=1e-5
            )


def test_capacity_two_drops_tokens_and_still_matches(converted):
    model, forge = converted
    _assert_logits_match(forge, model, FULL_INPUTS, FULL_TARGETS)
    batch = {
        "encoder_input_tokens": FULL_INPUTS,
        "decoder_input_tokens": _decoder_inputs(FULL_TARGETS),
        "decoder_target_tokens": FULL_TARGETS,
    }
    _, metrics = jax.jit(build_model(forge.config).loss_fn)(forge.params, batch)
    dropped = float(metrics["experts/fraction_tokens_left_behind"])
    assert (dropped > 0) == (forge.config.expert_capacity == CAPACITIES["drops"])


def test_export_read_back_by_transformers(converted, tmp_path):
    """Fresh t5forge weights, exported, give transformers t5forge's logits."""
    _, forge = converted
    params = jax.device_get(build_model(forge.config).init_params(jax.random.PRNGKey(7)))
    hf.save_hf_dir(params, forge.config, tmp_path)
    exported = transformers.SwitchTransformersForConditionalGeneration.from_pretrained(tmp_path)
    again = t5forge.load(tmp_path)
    _assert_logits_match(again, exported.eval())
    for name, value in hf_switch.params_to_hf_state_dict(params, forge.config).items():
        np.testing.assert_array_equal(exported.state_dict()[name].numpy(), value)


def test_greedy_matches_transformers_generate(converted):
    model, forge = converted
    expected = _hf_generate(model, ENCODER_INPUTS, 11, num_beams=1)
    np.testing.assert_array_equal(forge.generate(ENCODER_INPUTS, max_length=11), expected)


def test_beam_search_matches_transformers_generate(converted):
    model, forge = converted
    assert_beams_match_up_to_t5x_rules(model, forge)


def test_state_dict_round_trips_through_stacked_experts(converted):
    model, forge = converted
    state_dict = {k: v.numpy() for k, v in model.state_dict().items()}
    params = hf_switch.params_from_hf_state_dict(state_dict, forge.config)
    assert params["decoder"]["layers_1"]["mlp"]["expert"]["wi"]["kernel"].shape == (4, 12, 20)
    again = hf_switch.params_to_hf_state_dict(params, forge.config)
    assert set(state_dict) - set(again) == {
        "encoder.embed_tokens.weight",
        "decoder.embed_tokens.weight",
        "lm_head.weight",
    }
    for name, value in again.items():
        np.testing.assert_array_equal(state_dict[name], value)


def test_converts_to_flaxformer_names_and_back(converted, tmp_path):
    """`convert --to t5x` writes Flaxformer's expert and router names; read back with the
    routing config (a T5X checkpoint records none), it computes transformers' logits."""
    model, forge = converted
    model.save_pretrained(tmp_path / "hf")
    t5forge.convert(tmp_path / "hf", tmp_path / "t5x", from_="hf", to="t5x")
    written = {path.name for path in (tmp_path / "t5x").rglob("target.*")}
    assert "target.decoder.layers_1.mlp.router.router_weights.w.kernel" in written
    assert "target.encoder.layers_3.mlp.expert.wo.kernel" in written
    params, _, _ = load_t5x_checkpoint(next((tmp_path / "t5x").glob("checkpoint_*")))
    implied = infer_config(params)
    for stack in ("encoder", "decoder"):
        assert implied.sparse_layers(stack) == forge.config.sparse_layers(stack)
    again = t5forge.load(next((tmp_path / "t5x").glob("checkpoint_*")), config=forge.config)
    _assert_logits_match(again, model)


def test_t5x_routing_does_not_export():
    config = get_config("t5_1_0/tiny", num_experts=4, num_sparse_encoder_layers=1)
    with pytest.raises(ConfigError, match="routing_groups='batch'"):
        hf_switch.config_to_hf(config)
    with pytest.raises(ConfigError, match="Hugging Face T5 has no mixture of experts"):
        hf.config_to_hf(config)


def test_a_layout_transformers_cannot_build_is_refused():
    config = get_config(
        "t5_1_0/tiny",
        num_experts=4,
        num_sparse_encoder_layers=1,
        encoder_sparse_layout="bottom",
        num_sparse_decoder_layers=1,
        decoder_sparse_layout="huggingface",
        routing_groups="sequence",
        expert_capacity=4,
    )
    with pytest.raises(ConfigError, match=r"cannot place sparse encoder layers at \[0\]"):
        hf_switch.config_to_hf(config)
