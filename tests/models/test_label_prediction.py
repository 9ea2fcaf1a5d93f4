"""Label prediction: one decoder step scores the one-token labels, argmax on device.

The chosen label and its log-probability must agree with scoring each label as a one-token
target (score_batch), for encoder-decoder and prefix-LM models alike.
"""

import jax
import numpy as np
import pytest

from t5forge.errors import ConfigError
from t5forge.models.model import build_model
from t5forge.models.presets import get_config

VOCAB = 64
LABELS = np.array([11, 23, 42], np.int32)


def _model(preset):
    model = build_model(get_config(preset, dtype="float32", vocab_size=VOCAB))
    return model, model.init_params(jax.random.PRNGKey(3))


def _encdec_batches(inputs, label):
    """The eval batch of `inputs` with target [label] (what score_batch sees)."""
    target = np.full((len(inputs), 1), label, np.int32)
    return {
        "encoder_input_tokens": inputs,
        "decoder_input_tokens": np.zeros_like(target),
        "decoder_target_tokens": target,
    }


def _prefix_lm_batch(prompts, label):
    """Prefix-LM rows `prompt + [label]`, laid out as PrefixLMFeatureConverter does."""
    length = prompts.shape[1] + 2
    tokens = np.zeros((len(prompts), length), np.int32)
    causal = np.zeros_like(tokens)
    weights = np.zeros_like(tokens)
    for row, prompt in enumerate(prompts):
        sequence = [*prompt[prompt > 0], label]
        tokens[row, : len(sequence)] = sequence
        causal[row, : len(sequence)] = 1  # the inputs plus the position predicting the label
        weights[row, len(sequence) - 1] = 1
    decoder_inputs = np.concatenate([np.zeros((len(prompts), 1), np.int32), tokens[:, :-1]], 1)
    return {
        "decoder_input_tokens": decoder_inputs,
        "decoder_target_tokens": tokens,
        "decoder_causal_attention": causal,
        "decoder_loss_weights": weights,
    }


def _expected(model, params, make_batch, inputs):
    """Best label and its log-probability, by scoring every label as the whole target."""
    scores = np.stack(
        [np.asarray(model.score_batch(params, make_batch(inputs, label))) for label in LABELS],
        axis=1,
    )
    return LABELS[scores.argmax(axis=1)], scores.max(axis=1)


@pytest.mark.parametrize(
    "preset, make_batch",
    [("t5_1_1/tiny", _encdec_batches), ("decoder_only/tiny", _prefix_lm_batch)],
)
def test_predicted_label_is_the_best_scoring_label(preset, make_batch):
    model, params = _model(preset)
    inputs = np.random.RandomState(0).randint(3, VOCAB, (6, 5)).astype(np.int32)
    inputs[2, 3:] = 0
    batch = make_batch(inputs, LABELS[0])
    labels, aux = model.predict_batch_with_aux(
        params, batch, method="labels", label_token_ids=LABELS
    )
    expected_labels, expected_scores = _expected(model, params, make_batch, inputs)
    assert labels.shape == (6, 1) and labels.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(labels)[:, 0], expected_labels)
    np.testing.assert_allclose(np.asarray(aux["scores"]), expected_scores, rtol=1e-5, atol=1e-5)
    assert len(set(expected_labels)) > 1  # random weights: the rows do not all agree
    np.testing.assert_array_equal(
        model.predict_batch(params, batch, method="labels", label_token_ids=list(LABELS)), labels
    )


def test_label_method_needs_valid_label_ids():
    model, params = _model("t5_1_1/tiny")
    batch = _encdec_batches(np.array([[5, 6, 1]], np.int32), 11)
    with pytest.raises(ConfigError, match="method 'labels' needs label_token_ids"):
        model.predict_batch(params, batch, method="labels")
    with pytest.raises(ConfigError, match=r"label_token_ids \[3, 64\] must lie in \[0, 64\)"):
        model.predict_batch(params, batch, method="labels", label_token_ids=[3, 64])
