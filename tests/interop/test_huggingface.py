"""Parity with Hugging Face `transformers` T5 (PyTorch): weights, logits, decoding, scores, export.

Random-weight HF models of the layouts users bring (T5 1.0: relu + tied head, logits scaled;
T5 1.1: gated-GELU + separate lm_head; mT5: the MT5 classes, gated + separate head) and of the two
mixes transformers 5 adds (a T5 1.1 config built there ties the head without the scale; a scaled
separate head) are converted to t5forge and must compute what HF computes. The dims are tiny and the encoder/decoder depths differ so that
any mixed-up tensor shows. Beam search uses the only HF settings that reproduce T5X's algorithm:
`length_penalty=0.0` with t5forge `alpha=0` (HF divides by length**penalty, T5X by
((5+length)/6)**alpha; both are 1 at zero) and `early_stopping="never"` (keep searching while a
live beam could still beat the worst finished one, T5X's stopping rule).
"""

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import t5forge  # noqa: E402
from t5forge.errors import CheckpointError, ConfigError  # noqa: E402
from t5forge.interop import huggingface as hf  # noqa: E402
from t5forge.models.presets import get_config  # noqa: E402

VOCAB = 16
DIMS = dict(
    vocab_size=VOCAB,
    d_model=16,
    d_kv=4,
    d_ff=32,
    num_layers=2,
    num_decoder_layers=3,
    num_heads=4,
    dropout_rate=0.0,
    decoder_start_token_id=0,
)
# (config class, model class, layout fields, whether lm_head gets weights of its own, seed). A
# 16-token vocabulary makes EOS frequent enough that greedy rows and beams finish at different
# steps; the seeds give each layout different weights. The T5 layouts cover each (tie, scale)
# pair transformers 5 can hold, each with another feed-forward kind.
LAYOUTS = {
    "t5_1_0": (
        transformers.T5Config,
        transformers.T5ForConditionalGeneration,
        dict(feed_forward_proj="relu", tie_word_embeddings=True),
        False,
        0,
    ),
    "t5_1_1": (
        transformers.T5Config,
        transformers.T5ForConditionalGeneration,
        dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False),
        True,
        0,
    ),
    "tied_unscaled": (
        transformers.T5Config,
        transformers.T5ForConditionalGeneration,
        dict(feed_forward_proj="gated-silu", tie_word_embeddings=False),
        False,
        2,
    ),
    "separate_scaled": (
        transformers.T5Config,
        transformers.T5ForConditionalGeneration,
        dict(feed_forward_proj="gelu_new", scale_decoder_outputs=True),
        True,
        3,
    ),
    "mt5": (
        transformers.MT5Config,
        transformers.MT5ForConditionalGeneration,
        dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False),
        True,
        1,
    ),
}
# Right-padded encoder inputs (EOS=1 last) and decoder targets of different lengths.
ENCODER_INPUTS = np.array(
    [[5, 9, 3, 12, 7, 1, 0, 0], [14, 3, 1, 0, 0, 0, 0, 0], [8, 11, 15, 6, 4, 9, 13, 1]], np.int32
)
TARGETS = np.array([[6, 13, 1, 0, 0], [10, 15, 12, 11, 1], [2, 1, 0, 0, 0]], np.int32)


def _random_hf_model(layout: str):
    """An HF model with random weights, its lm_head untied where the layout has one."""
    config_class, model_class, extra, separate_head, seed = LAYOUTS[layout]
    torch.manual_seed(seed)
    model = model_class(config_class(**DIMS, **extra)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm" in name:  # ones by default, which would hide a swapped norm
                parameter.uniform_(0.5, 1.5)
    if separate_head:
        # transformers 5 ties every T5 head at construction; T5 1.1 / mT5 checkpoints do not.
        model.lm_head.weight = torch.nn.Parameter(torch.randn(VOCAB, DIMS["d_model"]))
        model.all_tied_weights_keys.pop("lm_head.weight")
    return model


def _parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def _tie_and_scale(model) -> tuple[bool, bool]:
    """(head is the embedding, logits scaled by d_model**-0.5) as the HF model computes them."""
    tied = model.lm_head.weight.data_ptr() == model.shared.weight.data_ptr()
    return tied, getattr(model.config, "scale_decoder_outputs", False)  # MT5 never scales


def test_t5_layouts_hold_every_tie_and_scale():
    combinations = {_tie_and_scale(_random_hf_model(name)) for name in LAYOUTS if name != "mt5"}
    assert combinations == {(True, True), (True, False), (False, True), (False, False)}


@pytest.fixture(scope="module", params=list(LAYOUTS))
def converted(request, tmp_path_factory):
    """(layout, HF model, t5forge Model loaded from an HF directory the HF model saved)."""
    model = _random_hf_model(request.param)
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path)
    return request.param, model, t5forge.load(path)


def _hf_logits(model, encoder_inputs, targets) -> np.ndarray:
    decoder_inputs = np.pad(targets, ((0, 0), (1, 0)))[:, :-1]
    with torch.no_grad():
        output = model(
            input_ids=torch.tensor(encoder_inputs, dtype=torch.long),
            attention_mask=torch.tensor(encoder_inputs > 0, dtype=torch.long),
            decoder_input_ids=torch.tensor(decoder_inputs, dtype=torch.long),
        )
    return output.logits.numpy()


def _hf_generate(model, encoder_inputs, max_length, **settings) -> np.ndarray:
    """HF `generate` tokens without the start token, 0 after EOS and to max_length (as T5X)."""
    # transformers sizes its default cache by num_layers, which breaks decoders deeper than
    # their encoder; a lazily growing cache avoids that.
    cache = transformers.EncoderDecoderCache(
        transformers.DynamicCache(), transformers.DynamicCache()
    )
    with torch.no_grad():
        tokens = model.generate(
            input_ids=torch.tensor(encoder_inputs, dtype=torch.long),
            attention_mask=torch.tensor(encoder_inputs > 0, dtype=torch.long),
            max_new_tokens=max_length,
            do_sample=False,
            past_key_values=cache,
            **settings,
        ).numpy()
    tokens = np.pad(tokens[:, 1:], ((0, 0), (0, max_length + 1 - tokens.shape[1])))
    after_eos = np.cumsum(np.cumsum(tokens == 1, axis=1), axis=1) > 1
    return np.where(after_eos, 0, tokens)


def test_config_round_trips_through_hf_fields():
    for name, scale in (("t5_1_0/small", False), ("t5_1_1/base", True), ("mt5/small", None)):
        config = get_config(name, dtype="float32", dropout_rate=0.1, scale_logits=scale)
        assert hf.config_from_hf(hf.config_to_hf(config)) == config
    # T5X's own rule spelled out is the same network, so the same config.
    assert get_config("byt5/small", scale_logits=False) == get_config("byt5/small")


def test_config_from_hf_reads_each_layout():
    t5_1_0 = hf.config_from_hf(transformers.T5Config(**DIMS).to_dict())
    # transformers 5 builds this as a tied, unscaled head; only a saved lm_head unties it.
    t5_1_1 = hf.config_from_hf(
        transformers.T5Config(
            **DIMS, feed_forward_proj="gated-gelu", tie_word_embeddings=False
        ).to_dict()
    )
    mt5 = hf.config_from_hf(transformers.MT5Config(**DIMS).to_dict())
    assert (t5_1_0.mlp_activations, t5_1_0.logits_via_embedding, t5_1_0.logits_scaled) == (
        ("relu",),
        True,
        True,
    )
    assert (t5_1_1.mlp_activations, t5_1_1.logits_via_embedding, t5_1_1.logits_scaled) == (
        ("gelu", "linear"),
        True,
        False,
    )
    assert (mt5.logits_via_embedding, mt5.logits_scaled) == (True, False)
    assert (t5_1_0.num_encoder_layers, t5_1_0.num_decoder_layers, t5_1_0.head_dim) == (2, 3, 4)


@pytest.mark.parametrize("projection", sorted(hf._ACTIVATIONS_FROM_HF))
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("scaled", [True, False])
def test_tie_and_scale_convert_for_every_feed_forward_kind(projection, tied, scaled):
    """The checkpoint's tensors say the tie, scale_decoder_outputs the scale, both ways."""
    hf_config = transformers.T5Config(
        **DIMS, feed_forward_proj=projection, scale_decoder_outputs=scaled
    ).to_dict()
    state_dict = {"shared.weight": np.zeros((VOCAB, 16), np.float32)}
    if not tied:
        state_dict["lm_head.weight"] = np.ones((VOCAB, 16), np.float32)
    config = hf.config_from_hf(hf_config, state_dict)
    assert config.mlp_activations == hf._ACTIVATIONS_FROM_HF[projection]
    assert (config.logits_via_embedding, config.logits_scaled) == (tied, scaled)
    exported = transformers.T5Config(**hf.config_to_hf(config))
    assert exported.scale_decoder_outputs is scaled
    assert hf.config_from_hf(exported.to_dict(), state_dict) == config


def test_unsupported_hf_configs_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="model_type 'umt5' is not supported"):
        hf.config_from_hf({"model_type": "umt5"})
    with pytest.raises(ConfigError, match="feed_forward_proj 'gelu' has no t5forge equivalent"):
        hf.config_from_hf({"model_type": "t5", "feed_forward_proj": "gelu"})
    with pytest.raises(ConfigError, match="no decoder-only model"):
        hf.config_to_hf(get_config("decoder_only/tiny"))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_state_dict_round_trip_is_exact(layout):
    model = _random_hf_model(layout)
    state_dict = {name: tensor.numpy() for name, tensor in model.state_dict().items()}
    config = hf.config_from_hf(model.config.to_dict(), state_dict)
    params = hf.params_from_hf_state_dict(state_dict, config)
    query = params["decoder"]["layers_2"]["encoder_decoder_attention"]["query"]["kernel"]
    np.testing.assert_array_equal(
        query, state_dict["decoder.block.2.layer.1.EncDecAttention.q.weight"].T
    )
    exported = hf.params_to_hf_state_dict(params, config)
    for name, value in exported.items():
        np.testing.assert_array_equal(value, state_dict[name], err_msg=name)
    again = hf.params_from_hf_state_dict(exported, config)
    for (path, a), (_, b) in zip(_leaves(params), _leaves(again), strict=True):
        np.testing.assert_array_equal(a, b, err_msg=path)


def test_scanned_layouts_convert_like_per_layer_ones():
    model = _random_hf_model("t5_1_1")
    state_dict = {name: tensor.numpy() for name, tensor in model.state_dict().items()}
    config = dataclasses.replace(
        hf.config_from_hf(model.config.to_dict(), state_dict), scan_layers=True
    )
    params = hf.params_from_hf_state_dict(state_dict, config)
    assert "layers_0" not in params["decoder"]
    assert params["decoder"]["layers"]["mlp"]["wo"]["kernel"].shape == (32, 3, 16)
    for name, value in hf.params_to_hf_state_dict(params, config).items():
        np.testing.assert_array_equal(value, state_dict[name], err_msg=name)


def _leaves(tree, prefix=""):
    for key in sorted(tree):
        if isinstance(tree[key], dict):
            yield from _leaves(tree[key], f"{prefix}{key}/")
        else:
            yield f"{prefix}{key}", tree[key]


def test_logits_match_hf_on_padded_batches(converted):
    _, model, forge = converted
    decoder_inputs = np.pad(TARGETS, ((0, 0), (1, 0)))[:, :-1]
    ours = forge.logits(ENCODER_INPUTS, decoder_inputs)
    theirs = _hf_logits(model, ENCODER_INPUTS, TARGETS)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    valid = TARGETS > 0
    np.testing.assert_allclose(ours[valid], theirs[valid], atol=1e-4, rtol=0)


def test_scores_equal_hf_summed_log_likelihoods(converted):
    _, model, forge = converted
    log_probs = torch.log_softmax(torch.tensor(_hf_logits(model, ENCODER_INPUTS, TARGETS)), -1)
    per_token = torch.gather(log_probs, -1, torch.tensor(TARGETS, dtype=torch.long)[..., None])
    expected = (per_token[..., 0].numpy() * (TARGETS > 0)).sum(-1)
    np.testing.assert_allclose(forge.score(ENCODER_INPUTS, TARGETS), expected, atol=1e-4, rtol=0)


def test_greedy_matches_hf_generate(converted):
    _, model, forge = converted
    expected = _hf_generate(model, ENCODER_INPUTS, 12, num_beams=1)
    np.testing.assert_array_equal(forge.generate(ENCODER_INPUTS, max_length=12), expected)


def _log_likelihood(model, encoder_row, tokens) -> float:
    target = np.array(tokens[: np.argmax(tokens == 1) + 1] if 1 in tokens else tokens)
    log_probs = torch.log_softmax(
        torch.tensor(_hf_logits(model, encoder_row[None], target[None].astype(np.int32))), -1
    )[0]
    return float(log_probs[np.arange(len(target)), target].sum())


def test_beam_search_matches_hf_generate_up_to_t5x_finishing_rules(converted):
    """Beam(4) equals HF's, except where T5X's two finishing rules pick another beam.

    HF and T5X keep the same 2k candidates and live beams, but (1) T5X finishes a beam that
    emits EOS anywhere among the 2k candidates, HF only within the top k, and (2) at
    max_length HF ranks the unfinished beams together with the finished ones, T5X returns
    finished beams only. No HF setting turns either off, so each differing row must be one of
    them: t5forge's beam ends in EOS and is more likely under HF's own model (1), or HF's beam
    is unfinished (2).
    """
    _, model, forge = converted
    assert_beams_match_up_to_t5x_rules(model, forge, ENCODER_INPUTS)


def assert_beams_match_up_to_t5x_rules(model, forge, encoder_inputs, max_length=12, beams=4):
    """t5forge's beam search equals HF's generate() on a model that starts decoding at 0, up to
    T5X's finishing rules (test_beam_search_matches_hf_generate_up_to_t5x_finishing_rules)."""
    expected = _hf_generate(
        model,
        encoder_inputs,
        max_length,
        num_beams=beams,
        length_penalty=0.0,
        early_stopping="never",
    )
    ours = forge.generate(
        encoder_inputs, max_length=max_length, method="beam", num_beams=beams, alpha=0.0
    )
    for row, (mine, theirs) in enumerate(zip(ours, expected, strict=True)):
        if np.array_equal(mine, theirs):
            continue
        assert 1 in mine, f"row {row}: t5forge returned an unfinished beam {mine}"
        more_likely = _log_likelihood(model, encoder_inputs[row], mine) > _log_likelihood(
            model, encoder_inputs[row], theirs
        )
        assert more_likely or 1 not in theirs, f"row {row}: {mine} vs HF {theirs}"


def test_export_loads_in_transformers_with_same_logits(converted, tmp_path):
    layout, model, forge = converted
    forge.save_hf(tmp_path)
    exported, info = transformers.T5ForConditionalGeneration.from_pretrained(
        tmp_path, output_loading_info=True
    )
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    assert _parameter_count(exported.eval()) == _parameter_count(model)
    np.testing.assert_allclose(
        _hf_logits(exported, ENCODER_INPUTS, TARGETS),
        _hf_logits(model, ENCODER_INPUTS, TARGETS),
        atol=1e-5,
        rtol=0,
    )
    reloaded = t5forge.load(tmp_path)
    assert reloaded.config == forge.config
    for (path, a), (_, b) in zip(_leaves(forge.params), _leaves(reloaded.params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=path)


def test_export_keeps_tie_and_scale_in_transformers(converted, tmp_path):
    _, model, forge = converted
    forge.save_hf(tmp_path)
    tied, scaled = _tie_and_scale(model)
    hf_config = json.loads((tmp_path / "config.json").read_text())
    assert (hf_config["tie_word_embeddings"], hf_config["scale_decoder_outputs"]) == (tied, scaled)
    assert _tie_and_scale(transformers.T5ForConditionalGeneration.from_pretrained(tmp_path)) == (
        tied,
        scaled,
    )


def test_reads_sharded_safetensors_and_pytorch_bin(tmp_path):
    model = _random_hf_model("t5_1_1")
    model.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    (tmp_path / "bin").mkdir()
    torch.save(model.state_dict(), tmp_path / "bin" / "pytorch_model.bin")
    (tmp_path / "bin" / "config.json").write_text(model.config.to_json_string())
    _, reference = hf.load_hf_dir(_saved(model, tmp_path / "single"))
    for directory in ("sharded", "bin"):
        _, params = hf.load_hf_dir(tmp_path / directory)
        for (path, a), (_, b) in zip(_leaves(reference), _leaves(params), strict=True):
            np.testing.assert_array_equal(a, b, err_msg=f"{directory}: {path}")


def _saved(model, path):
    model.save_pretrained(path)
    return path


def test_mismatched_checkpoint_names_the_tensor_and_both_shapes(tmp_path):
    model = _random_hf_model("t5_1_1")
    model.save_pretrained(tmp_path)
    hf_config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**hf_config, "d_ff": 48}))
    with pytest.raises(
        CheckpointError,
        match=r"'encoder\.block\.0\.layer\.1\.DenseReluDense"
        r"\.wi_0\.weight' has shape \(32, 16\) but the "
        r"config needs \(48, 16\)",
    ):
        hf.load_hf_dir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**hf_config, "num_layers": 1}))
    with pytest.raises(CheckpointError, match=r"tensor 'encoder\.block\.1\..*' that a model "):
        hf.load_hf_dir(tmp_path)


def test_missing_config_json_is_named(tmp_path):
    with pytest.raises(CheckpointError, match=r"config\.json not found"):
        hf.load_hf_dir(tmp_path)
