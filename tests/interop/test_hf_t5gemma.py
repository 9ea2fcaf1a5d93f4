"""Parity with Hugging Face `transformers` T5Gemma (PyTorch, eager attention), both directions.

Tiny random-weight T5Gemma models chosen so that every Gemma switch runs: 3-position sliding
windows mixed with full layers in both stacks, attention and final soft-caps of 2.0 and 3.0
(low enough to bite), fewer key/value heads than query heads, a query_pre_attn_scalar that is
not head_dim, odd lengths and padded rows. Three layouts: the head tied to the decoder's
embedding, an untied head, and the 9b-2b shape (an encoder wider than the decoder, with heads
of its own). The norms' weights are random too, so a swapped pre/post norm shows.
"""

import dataclasses

import jax
import numpy as np
import pytest
from commands import command_env
from commands import t5forge as t5forge_command

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import t5forge  # noqa: E402
from t5forge.data import SentencePieceVocabulary  # noqa: E402
from t5forge.errors import ConfigError  # noqa: E402
from t5forge.interop import hf_t5gemma  # noqa: E402
from t5forge.interop import huggingface as hf  # noqa: E402
from t5forge.models.model import build_model  # noqa: E402
from t5forge.models.presets import get_config  # noqa: E402
from tests.interop.test_huggingface import _hf_generate  # noqa: E402

VOCAB = 16


def _stack(hidden: int, heads: int, kv_heads: int, layer_types: list[str]) -> dict:
    return dict(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=20,
        num_hidden_layers=len(layer_types),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=6,
        query_pre_attn_scalar=5,
        sliding_window=3,
        layer_types=layer_types,
        attn_logit_softcapping=2.0,
        final_logit_softcapping=3.0,
        rope_parameters={"rope_type": "default", "rope_theta": 100.0},
    )


SLIDING, FULL = "sliding_attention", "full_attention"
# (encoder stack, decoder stack, tie_word_embeddings, seed)
LAYOUTS = {
    "tied": (
        _stack(12, 4, 2, [SLIDING, FULL, SLIDING]),
        _stack(12, 4, 2, [SLIDING, FULL]),
        True,
        0,
    ),
    "untied": (
        _stack(12, 4, 1, [SLIDING, FULL]),
        _stack(12, 4, 1, [FULL, SLIDING, SLIDING]),
        False,
        1,
    ),
    "9b_2b": (
        _stack(18, 6, 3, [SLIDING, FULL, SLIDING]),
        _stack(12, 4, 2, [SLIDING, FULL]),
        True,
        2,
    ),
}
# Right-padded encoder inputs (EOS=1 last, odd lengths) and decoder targets.
ENCODER_INPUTS = np.array(
    [[5, 9, 3, 12, 7, 1, 0, 0, 0], [14, 3, 1, 0, 0, 0, 0, 0, 0], [8, 11, 15, 6, 4, 9, 13, 10, 1]],
    np.int32,
)
TARGETS = np.array([[6, 13, 1, 0, 0, 0, 0], [10, 15, 12, 11, 9, 8, 1], [3, 1, 0, 0, 0, 0, 0]])


def _hf_config(layout: str):
    encoder, decoder, tied, _ = LAYOUTS[layout]
    config = transformers.T5GemmaConfig(
        encoder=encoder, decoder=decoder, vocab_size=VOCAB, tie_word_embeddings=tied
    )
    config._attn_implementation = "eager"
    return config


def _random_hf_model(layout: str):
    torch.manual_seed(LAYOUTS[layout][3])
    model = transformers.T5GemmaForConditionalGeneration(_hf_config(layout)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)  # norms included: they start at zero
    return model


@pytest.fixture(scope="module", params=list(LAYOUTS))
def converted(request, tmp_path_factory):
    """(layout, HF model, t5forge Model loaded from the directory the HF model saved)."""
    model = _random_hf_model(request.param)
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path)
    return request.param, model, t5forge.load(path)


def _decoder_inputs(targets):
    """Targets shifted right behind T5Gemma's start token (bos = 2)."""
    return np.pad(targets, ((0, 0), (1, 0)), constant_values=2)[:, :-1].astype(np.int32)


def _hf_logits(model, encoder_inputs, decoder_inputs) -> np.ndarray:
    with torch.no_grad():
        return model(
            input_ids=torch.tensor(encoder_inputs, dtype=torch.long),
            attention_mask=torch.tensor(encoder_inputs > 0, dtype=torch.long),
            decoder_input_ids=torch.tensor(decoder_inputs, dtype=torch.long),
        ).logits.numpy()


def _assert_close_where_valid(ours, theirs):
    valid = TARGETS > 0  # padded decoder positions compute nothing anyone reads
    np.testing.assert_allclose(ours[valid], theirs[valid], atol=1e-4, rtol=0)


def test_config_reads_every_switch(converted):
    layout, model, forge = converted
    config = forge.config
    assert config.decoder_start_token_id == 2 and config.separate_embeddings
    assert config.logits_via_embedding == LAYOUTS[layout][2] and not config.logits_scaled
    assert config.kv_heads < config.num_heads and config.sliding_window == 3
    assert config.attn_logit_softcap == 2.0 and config.final_logit_softcap == 3.0
    assert hf_t5gemma.config_from_hf(hf_t5gemma.config_to_hf(config)) == config
    assert bool(config.encoder_overrides) == (layout == "9b_2b")


def test_imported_logits_match_transformers(converted):
    _, model, forge = converted
    decoder_inputs = _decoder_inputs(TARGETS)
    expected = _hf_logits(model, ENCODER_INPUTS, decoder_inputs)
    _assert_close_where_valid(forge.logits(ENCODER_INPUTS, decoder_inputs), expected)


def test_t5x_start_slot_reads_as_the_start_token(converted):
    """T5X's shifted-right 0 at position 0 computes what bos = 2 computes in transformers."""
    _, model, forge = converted
    t5x_inputs = np.pad(TARGETS, ((0, 0), (1, 0)))[:, :-1].astype(np.int32)
    expected = _hf_logits(model, ENCODER_INPUTS, _decoder_inputs(TARGETS))
    _assert_close_where_valid(forge.logits(ENCODER_INPUTS, t5x_inputs), expected)


def test_export_read_back_by_transformers(converted, tmp_path):
    """Fresh t5forge weights, exported, give transformers t5forge's logits."""
    _, _, forge = converted
    params = jax.device_get(build_model(forge.config).init_params(jax.random.PRNGKey(7)))
    hf.save_hf_dir(params, forge.config, tmp_path)
    exported = transformers.T5GemmaForConditionalGeneration.from_pretrained(
        tmp_path, attn_implementation="eager"
    ).eval()
    again = t5forge.load(tmp_path)
    decoder_inputs = _decoder_inputs(TARGETS)
    expected = _hf_logits(exported, ENCODER_INPUTS, decoder_inputs)
    _assert_close_where_valid(again.logits(ENCODER_INPUTS, decoder_inputs), expected)
    for name, value in hf_t5gemma.params_to_hf_state_dict(params, forge.config).items():
        np.testing.assert_array_equal(exported.state_dict()[name].numpy(), value)


def test_greedy_matches_transformers_generate(converted):
    _, model, forge = converted
    expected = _hf_generate(model, ENCODER_INPUTS, 11, num_beams=1)
    np.testing.assert_array_equal(forge.generate(ENCODER_INPUTS, max_length=11), expected)


def _log_likelihood(model, encoder_row, tokens) -> float:
    """log p(tokens up to EOS | encoder_row) under the HF model."""
    target = tokens[: np.argmax(tokens == 1) + 1] if 1 in tokens else tokens
    logits = _hf_logits(model, encoder_row[None], _decoder_inputs(target[None]))
    log_probs = torch.log_softmax(torch.tensor(logits), -1)[0]
    return float(log_probs[np.arange(len(target)), target].sum())


def assert_beams_match_up_to_t5x_rules(model, forge):
    """Beam(3) equals HF's generate() with the settings that make HF's search T5X's, except
    where one of T5X's two finishing rules picks another beam (test_huggingface.py says which):
    then t5forge's beam is finished and more likely under HF's own model, or HF's unfinished."""
    expected = _hf_generate(
        model, ENCODER_INPUTS, 11, num_beams=3, length_penalty=0.0, early_stopping="never"
    )
    ours = forge.generate(ENCODER_INPUTS, max_length=11, method="beam", num_beams=3, alpha=0.0)
    for row, (mine, theirs) in enumerate(zip(ours, expected, strict=True)):
        if np.array_equal(mine, theirs):
            continue
        assert 1 in mine, f"row {row}: t5forge returned an unfinished beam {mine}"
        more_likely = _log_likelihood(model, ENCODER_INPUTS[row], mine) > _log_likelihood(
            model, ENCODER_INPUTS[row], theirs
        )
        assert more_likely or 1 not in theirs, f"row {row}: {mine} vs HF {theirs}"


def test_beam_search_matches_transformers_generate(converted):
    _, model, forge = converted
    assert_beams_match_up_to_t5x_rules(model, forge)


def test_t5_export_refuses_a_gemma_config():
    config = get_config("t5_1_1/tiny", head_dim=4, rope_theta=100.0)
    with pytest.raises(ConfigError, match="Hugging Face T5 has no rope_theta"):
        hf.config_to_hf(config)


def test_gemma_vocabulary_travels_as_tokenizer_model(test_spm_path, tmp_path):
    """Export writes the SentencePiece model as Gemma's tokenizer.model; load reads it back
    as the vocabulary, every id its own (no T5 sentinels)."""
    vocabulary = SentencePieceVocabulary(test_spm_path)
    config = dataclasses.replace(
        hf_t5gemma.config_from_hf(_hf_config("tied").to_dict()),
        vocab_size=vocabulary.vocab_size,
    )
    params = jax.device_get(build_model(config).init_params(jax.random.PRNGKey(3)))
    hf.save_hf_dir(params, config, tmp_path, vocab_path=test_spm_path)
    assert (tmp_path / hf_t5gemma.TOKENIZER_FILE).read_bytes() == test_spm_path.read_bytes()
    again = t5forge.load(tmp_path)
    assert again.vocabulary.extra_ids == 0
    assert again.vocabulary.encode("the house") == vocabulary.encode("the house")
    assert isinstance(again.generate(["the house"], max_length=4)[0], str)


def test_convert_to_t5forge_and_refused_to_t5x(tmp_path):
    """`t5forge convert --from hf` keeps a T5Gemma exact; T5X has no such network."""
    hf_dir = tmp_path / "hf"
    _random_hf_model("untied").save_pretrained(hf_dir)
    forge = t5forge.load(hf_dir)
    t5forge.convert(hf_dir, tmp_path / "forge", from_="hf", to="t5forge")
    again = t5forge.load(tmp_path / "forge")
    assert again.config == forge.config
    decoder_inputs = _decoder_inputs(TARGETS)
    np.testing.assert_array_equal(
        again.logits(ENCODER_INPUTS, decoder_inputs), forge.logits(ENCODER_INPUTS, decoder_inputs)
    )
    with pytest.raises(ConfigError, match="T5X's network has no num_kv_heads"):
        t5forge.convert(hf_dir, tmp_path / "t5x", from_="hf", to="t5x")


@pytest.mark.slow
def test_fine_tunes_packed_from_a_transformers_directory(tmp_path, test_spm_path):
    """`t5forge train` with INITIAL_CHECKPOINT_PATH = a T5Gemma HF directory and a gin file of
    its T5Config fields fine-tunes it on packed en->de, evaluates and infers."""
    vocab_size = 128  # the task's 26 pieces and 100 sentinels
    config = _hf_config("9b_2b")
    for stack in (config.encoder, config.decoder):
        stack.vocab_size = vocab_size
    config.vocab_size = vocab_size
    torch.manual_seed(0)
    transformers.T5GemmaForConditionalGeneration(config).save_pretrained(tmp_path / "hf")
    model_config = hf_t5gemma.config_from_hf(config.to_dict())
    gin_file = tmp_path / "t5gemma.gin"
    gin_file.write_text(
        "".join(
            f"T5Config.{field.name} = {getattr(model_config, field.name)!r}\n"
            for field in dataclasses.fields(model_config)
            if getattr(model_config, field.name) != field.default
        )
    )
    run = t5forge_command(
        "train",
        "--gin_file=examples/finetune_en_de/finetune.gin",
        f"--gin_file={gin_file}",
        f"--gin.MODEL_DIR={tmp_path / 'run'}",
        f"--gin.INITIAL_CHECKPOINT_PATH={tmp_path / 'hf'}",
        "--gin.TRAIN_STEPS=2",
        "--gin.BATCH_SIZE=4",
        "--gin.CHECKPOINT_PERIOD=2",
        "--gin.EVAL_PERIOD=2",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 24, 'targets': 16}",
        "--gin.infer_eval/utils.DatasetConfig.batch_size=8",
        env=command_env(T5FORGE_VOCAB=test_spm_path),
        check=True,
    )
    assert "loaded every parameter from" in run.stderr
    trained = t5forge.load(tmp_path / "run" / "checkpoint_2").config
    assert trained == dataclasses.replace(model_config, dropout_rate=0.1)  # finetune.gin's
    assert (tmp_path / "run" / "inference_eval").is_dir()
