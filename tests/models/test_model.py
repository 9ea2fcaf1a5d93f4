"""The model API: params, scoring, loss, jitted prediction, and the user-facing errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5forge.errors import CheckpointError, ConfigError, DataError
from t5forge.models import decoding
from t5forge.models.model import DecoderOnlyModel, EncoderDecoderModel, build_model
from t5forge.models.network import build_network
from t5forge.models.presets import get_config

VOCAB = 64


@pytest.fixture(scope="module")
def encdec():
    model = build_model(get_config("t5_1_1/tiny", dtype="float32", vocab_size=VOCAB))
    return model, model.init_params(jax.random.PRNGKey(0))


@pytest.fixture(scope="module")
def batch():
    rng = np.random.RandomState(0)
    enc = rng.randint(2, VOCAB, (2, 7)).astype(np.int32)
    enc[1, 5:] = 0
    tgt = rng.randint(2, VOCAB, (2, 6)).astype(np.int32)
    tgt[1, 4:] = 0
    dec = np.concatenate([np.zeros((2, 1), np.int32), tgt[:, :-1]], axis=1)
    return {
        "encoder_input_tokens": enc,
        "decoder_input_tokens": dec,
        "decoder_target_tokens": tgt,
        "decoder_loss_weights": (tgt > 0).astype(np.int32),
    }


def test_params_are_plain_float32_dicts(encdec):
    model, params = encdec
    assert isinstance(model, EncoderDecoderModel)
    leaves = jax.tree_util.tree_leaves(params)
    assert all(isinstance(x, jax.Array) and x.dtype == jnp.float32 for x in leaves)
    abstract = model.abstract_params()
    assert jax.tree_util.tree_structure(abstract) == jax.tree_util.tree_structure(params)
    assert set(params) == {"token_embedder", "encoder", "decoder"}
    model.check_params_match(params)


def test_mismatched_params_name_the_tensor_and_both_shapes(encdec):
    model, params = encdec
    wrong = jax.tree_util.tree_map(lambda x: x, params)
    wrong["encoder"]["layers_1"]["mlp"]["wo"]["kernel"] = jnp.zeros((3, 8))
    with pytest.raises(
        CheckpointError,
        match=r"has 'encoder/layers_1/mlp/wo/kernel' with shape "
        r"\(3, 8\) but the model expects \(16, 8\)",
    ):
        model.check_params_match(wrong)
    del wrong["decoder"]["logits_dense"]
    with pytest.raises(CheckpointError, match="has no parameter 'decoder/logits_dense/kernel'"):
        model.check_params_match(wrong)


def test_token_ids_outside_the_vocabulary_are_data_errors(encdec, batch):
    model, params = encdec
    bad = dict(batch, encoder_input_tokens=batch["encoder_input_tokens"] + VOCAB)
    with pytest.raises(
        DataError,
        match=rf"encoder_input_tokens holds token id \d+ but the "
        rf"model's vocab_size is {VOCAB}",
    ):
        model.predict_batch(params, bad)
    with pytest.raises(DataError, match="vocab_size"):
        model.score_batch(params, bad)


def test_score_is_the_weighted_target_log_likelihood(encdec, batch):
    model, params = encdec
    log_probs = jax.nn.log_softmax(model.logits(params, batch))
    target_lp = np.take_along_axis(
        np.asarray(log_probs), batch["decoder_target_tokens"][..., None], axis=-1
    )[..., 0]
    expected = (target_lp * batch["decoder_loss_weights"]).sum(-1)
    np.testing.assert_allclose(model.score_batch(params, batch), expected, rtol=1e-5)


def test_loss_fn_is_differentiable_under_jit(encdec, batch):
    model, params = encdec
    (loss, metrics), grads = jax.jit(jax.value_and_grad(model.loss_fn, has_aux=True))(params, batch)
    assert np.isfinite(float(loss)) and float(metrics["loss"]) == float(loss)
    assert jax.tree_util.tree_structure(grads) == jax.tree_util.tree_structure(params)
    assert float(jnp.abs(grads["decoder"]["logits_dense"]["kernel"]).sum()) > 0


def _shift_right(tokens):
    return np.concatenate([np.zeros_like(tokens[:, :1]), tokens[:, :-1]], axis=1)


def test_greedy_prediction_is_the_argmax_of_its_own_teacher_forced_logits(encdec, batch):
    model, params = encdec
    tokens, aux = model.predict_batch_with_aux(params, batch)
    tokens = np.asarray(tokens)
    assert tokens.shape == (2, 6) and aux["scores"].shape == (2,)
    forced = dict(
        batch,
        decoder_input_tokens=_shift_right(tokens),
        decoder_target_tokens=np.maximum(tokens, 1),
    )
    argmax = np.asarray(model.logits(params, forced)).argmax(-1)
    for row in range(2):
        ended = np.flatnonzero(tokens[row] == 1)
        stop = ended[0] + 1 if ended.size else tokens.shape[1]
        np.testing.assert_array_equal(tokens[row, :stop], argmax[row, :stop])
        assert (tokens[row, stop:] == 0).all()


def test_beam_and_sampling_decodes(encdec, batch):
    model, params = encdec
    beams, aux = model.predict_batch_with_aux(
        params, batch, method="beam", num_decodes=3, return_all_decodes=True
    )
    assert beams.shape == (2, 3, 6) and aux["scores"].shape == (2, 3)
    assert (np.diff(np.asarray(aux["scores"]), axis=1) >= 0).all()  # best last
    sample = lambda seed: model.predict_batch(  # noqa: E731
        params, batch, rng=jax.random.PRNGKey(seed), method="sample", topk=0, temperature=1.0
    )
    np.testing.assert_array_equal(sample(3), sample(3))
    with pytest.raises(ConfigError, match="unknown decoding method 'nucleus'"):
        model.predict_batch(params, batch, method="nucleus")


def _prompted_rows(length):
    """A prefix-LM batch of 3 rows whose prompts (1-3 tokens) end at different positions."""
    tokens = np.zeros((3, length), np.int32)
    causal = np.zeros((3, length), np.int32)
    for row, prompt in enumerate(([7, 8, 9], [10, 11], [12])):
        tokens[row, 1 : 1 + len(prompt)] = prompt
        causal[row, : 1 + len(prompt)] = 1
    return {"decoder_input_tokens": tokens, "decoder_causal_attention": causal}


# Both network kinds, and a scanned stack (whose caches gain a layer axis).
DECODING_MODELS = pytest.mark.parametrize(
    "config_name, scan_layers",
    [("t5_1_1/tiny", False), ("t5_1_1/tiny", True), ("decoder_only/tiny", False)],
)


def _decoding_model(config_name: str, scan_layers: bool):
    """(model, params, inputs of 3 rows) for decoding_state: prompts for a decoder-only
    model, encoder tokens for an encoder-decoder."""
    config = get_config(config_name, dtype="float32", vocab_size=VOCAB, scan_layers=scan_layers)
    model = build_model(config)
    params = model.init_params(jax.random.PRNGKey(3))
    if config.is_decoder_only:
        return model, params, _prompted_rows(10)
    return (
        model,
        params,
        {"encoder_input_tokens": np.random.RandomState(1).randint(2, VOCAB, (3, 7))},
    )


@DECODING_MODELS
def test_beams_reading_their_cache_through_a_lineage_equal_beams_that_copy_it(
    config_name, scan_layers
):
    # Both models' steps read their self-attention cache through DecodingCache.lineage, so beam
    # search reorders that table instead of every beam's keys and values. Dropping the lineage
    # makes the loop copy the cache rows as before: both must pick the same beams.
    model, params, inputs = _decoding_model(config_name, scan_layers)
    prompt, cache, tokens_to_logits = model.decoding_state(params, inputs, 10)
    assert cache.lineage.shape == (3, 1, 10)

    @jax.jit
    def beams(cache):
        return decoding.beam_search(prompt, cache, tokens_to_logits, model.eos_id, 4, alpha=0.6)

    sequences, scores = beams(cache)
    copied_sequences, copied_scores = beams(cache._replace(lineage=None))
    np.testing.assert_array_equal(sequences, copied_sequences)
    np.testing.assert_allclose(scores, copied_scores, rtol=1e-5)
    # Each input's four beams differ: their caches hold different histories.
    assert all(len({tuple(beam) for beam in row}) == 4 for row in np.asarray(sequences).tolist())


@DECODING_MODELS
def test_a_step_reading_its_cache_through_a_select_equals_one_reading_the_write(
    config_name, scan_layers
):
    # select_cache_reads (the server's lone-row step) reads the new position through a select
    # over the cache as it was, not through the written cache: the same numbers, so the same
    # logits and the same cache, bit for bit, step after step.
    model, params, inputs = _decoding_model(config_name, scan_layers)
    steps, programs = {}, {}
    for select in (False, True):
        _, cache, tokens_to_logits = model.decoding_state(
            params, inputs, 10, select_cache_reads=select
        )
        step = jax.jit(tokens_to_logits)
        token, outputs = jnp.ones((3, 1), jnp.int32), []
        programs[select] = step.lower(token, cache, jnp.int32(0)).as_text()
        for position in range(5):
            logits, cache = step(token, cache, jnp.int32(position))
            token = jnp.argmax(logits, axis=-1)[:, None].astype(jnp.int32)
            outputs.append((logits, cache))
        steps[select] = outputs
    for (logits, cache), (selected_logits, selected_cache) in zip(steps[False], steps[True]):
        np.testing.assert_array_equal(logits, selected_logits)
        jax.tree.map(np.testing.assert_array_equal, cache, selected_cache)
    assert programs[False] != programs[True]  # the option did reach the attention layers


def test_decodes_sharing_an_encoder_memory_equal_decodes_of_repeated_inputs(encdec, batch):
    # num_decodes samples read each input's cross-attention keys/values once (DecodingCache's
    # per_input); the same rows given as repeated inputs, one decode each, own their copies.
    # Rows line up (input-major) and draw the same random numbers, so the tokens must agree.
    model, params = encdec
    decodes = 3
    options = dict(
        method="sample", topk=0, temperature=1.0, return_all_decodes=True, max_decode_length=6
    )
    shared, _ = model.predict_batch_with_aux(
        params, batch, rng=jax.random.PRNGKey(5), num_decodes=decodes, **options
    )
    repeated = {"encoder_input_tokens": np.repeat(batch["encoder_input_tokens"], decodes, 0)}
    copies, _ = model.predict_batch_with_aux(
        params, repeated, rng=jax.random.PRNGKey(5), num_decodes=1, **options
    )
    # Each input's decodes come back sorted by score: compare them as sets of sequences.
    copies = np.asarray(copies).reshape(2, decodes, -1)
    for row in range(2):
        assert sorted(map(tuple, np.asarray(shared)[row].tolist())) == sorted(
            map(tuple, copies[row].tolist())
        )


def test_prefix_lm_predicts_the_continuation_of_its_prompt():
    model = build_model(get_config("decoder_only/tiny", dtype="float32", vocab_size=VOCAB))
    assert isinstance(model, DecoderOnlyModel)
    params = model.init_params(jax.random.PRNGKey(1))
    prompt = np.array([[7, 8, 9], [10, 11, 0]], np.int32)
    length = 8
    dec = np.zeros((2, length), np.int32)
    dec[:, 1:4] = prompt
    causal = np.zeros((2, length), np.int32)
    causal[0, :4] = 1
    causal[1, :3] = 1
    batch = {
        "decoder_input_tokens": dec,
        "decoder_causal_attention": causal,
        "decoder_target_tokens": np.zeros_like(dec),
    }
    continuation = np.asarray(model.predict_batch(params, batch))
    assert continuation.shape == (2, length)
    # Teacher-force prompt + continuation with the same bidirectional prefix: every generated
    # token must be the argmax at its position.
    network = build_network(model.config)
    for row, prompt_length in ((0, 3), (1, 2)):
        generated = continuation[row][continuation[row] > 0]
        full = np.concatenate([[0], prompt[row, :prompt_length], generated])[:length]
        inputs = np.zeros((1, length), np.int32)
        inputs[0, : len(full)] = full
        logits = network.apply(
            {"params": params},
            jnp.asarray(inputs),
            jnp.ones_like(inputs),
            decoder_causal_attention=jnp.asarray(causal[row : row + 1]),
        )
        argmax = np.asarray(logits)[0].argmax(-1)
        n = len(generated)
        np.testing.assert_array_equal(generated, argmax[prompt_length : prompt_length + n])
