"""Cross entropy, z-loss, label smoothing and loss normalizing factors on hand-computed values."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from t5forge.errors import ConfigError
from t5forge.models.losses import (
    loss_and_metrics,
    normalizing_factor_and_weights,
    token_cross_entropy,
)

# One row, two positions, vocabulary of 3. Position 0 predicts token 0 (correct), position 1
# predicts token 0 but the target is 2.
LOGITS = jnp.array([[[2.0, 0.0, 0.0], [1.0, 0.0, -1.0]]])
TARGETS = jnp.array([[0, 2]])
LSE = [math.log(math.exp(2) + 2), math.log(math.e + 1 + math.exp(-1))]
NLL = [LSE[0] - 2.0, LSE[1] + 1.0]


def test_cross_entropy_and_z_loss_by_hand():
    loss, z_term = token_cross_entropy(LOGITS, TARGETS, z_loss=1e-2)
    np.testing.assert_allclose(z_term[0], [1e-2 * LSE[0] ** 2, 1e-2 * LSE[1] ** 2], rtol=1e-6)
    np.testing.assert_allclose(loss[0], [NLL[0] + z_term[0, 0], NLL[1] + z_term[0, 1]], rtol=1e-6)


def test_label_smoothing_subtracts_the_target_entropy():
    smoothing = 0.1
    loss, _ = token_cross_entropy(LOGITS, TARGETS, label_smoothing=smoothing)
    confidence, low = 0.9, 0.05
    log_probs = np.asarray(LOGITS[0]) - np.array(LSE)[:, None]
    soft = np.full((2, 3), low)
    soft[0, 0] = soft[1, 2] = confidence
    entropy = -(confidence * math.log(confidence) + 2 * low * math.log(low))
    expected = -(soft * log_probs).sum(-1) - entropy
    np.testing.assert_allclose(loss[0], expected, rtol=1e-5)
    # A prediction equal to the smoothed target scores exactly 0.
    perfect = jnp.log(jnp.array([[[confidence, low, low]]]))
    np.testing.assert_allclose(
        token_cross_entropy(perfect, jnp.array([[0]]), 0, smoothing)[0], 0.0, atol=1e-6
    )


WEIGHTS = jnp.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    "factor,divisor",
    [
        (None, None),
        (4.0, 4.0),
        ("NUM_REAL_TARGET_TOKENS", 3.0),
        ("NUM_TOTAL_TARGET_TOKENS", 6.0),
        ("AVERAGE_PER_SEQUENCE", 2.0),
    ],
)
def test_normalizing_factors(factor, divisor):
    got, weights = normalizing_factor_and_weights(factor, WEIGHTS)
    assert (got is None) == (divisor is None)
    if divisor is not None:
        assert float(got) == divisor
    expected = [[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]] if factor == "AVERAGE_PER_SEQUENCE" else WEIGHTS
    np.testing.assert_allclose(weights, expected)


def test_average_per_sequence_weights_each_packed_segment_equally():
    weights = jnp.array([[1.0, 1.0, 1.0, 1.0, 0.0]])
    segments = jnp.array([[1, 1, 1, 2, 0]])
    divisor, scaled = normalizing_factor_and_weights("AVERAGE_PER_SEQUENCE", weights, segments)
    np.testing.assert_allclose(scaled, [[1 / 3, 1 / 3, 1 / 3, 1.0, 0.0]], rtol=1e-6)
    assert float(divisor) == pytest.approx(2.0)


@pytest.mark.parametrize("factor", [0.0, -1.0, "NUM_TOKENS"])
def test_bad_normalizing_factor_is_a_config_error(factor):
    with pytest.raises(ConfigError, match="loss_normalizing_factor"):
        normalizing_factor_and_weights(factor, WEIGHTS)


def test_metrics_have_t5x_names_and_values():
    logits = jnp.concatenate([LOGITS, jnp.zeros((1, 1, 3))], axis=1)  # a padded third position
    targets = jnp.array([[0, 2, 0]])
    weights = jnp.array([[1.0, 1.0, 0.0]])
    z = 1e-2
    loss, metrics = loss_and_metrics(
        logits, targets, weights, z_loss=z, loss_normalizing_factor="NUM_REAL_TARGET_TOKENS"
    )
    z_total = z * (LSE[0] ** 2 + LSE[1] ** 2)
    token_sum = NLL[0] + NLL[1] + z_total
    expected_loss = token_sum / 2
    assert float(loss) == pytest.approx(expected_loss, rel=1e-6)
    expected = {
        "loss": expected_loss,
        "accuracy": 0.5,
        # Per-token metrics are the plain averages of the unnormalized sum: divided once.
        "loss_per_nonpadding_target_token": token_sum / 2,
        "loss_per_all_target_tokens": token_sum / 3,
        "z_loss_per_all_target_tokens": z_total / 3,
        "cross_ent_loss_per_all_target_tokens": (NLL[0] + NLL[1]) / 3,
        "z_loss": z_total / 2,
        "cross_ent_loss": (NLL[0] + NLL[1]) / 2,
        "non_padding_fraction/loss_weights": 2 / 3,
        # 'overall' counts non-zero target ids; this toy target uses id 0 at a weighted position.
        "non_padding_fraction/overall": 1 / 3,
    }
    for name, value in expected.items():
        assert float(metrics[name]) == pytest.approx(value, rel=1e-5), name


@pytest.mark.parametrize(
    "factor",
    [None, 7.0, "NUM_REAL_TARGET_TOKENS", "NUM_TOTAL_TARGET_TOKENS", "AVERAGE_PER_SEQUENCE"],
)
def test_per_token_metrics_do_not_depend_on_the_normalizing_factor(factor):
    logits = jnp.concatenate([LOGITS, jnp.zeros((1, 1, 3))], axis=1)
    targets, weights = jnp.array([[1, 2, 0]]), jnp.array([[1.0, 1.0, 0.0]])
    _, metrics = loss_and_metrics(logits, targets, weights, loss_normalizing_factor=factor)
    per_token = float(metrics["loss_per_nonpadding_target_token"])
    plain = float(jnp.mean(token_cross_entropy(logits, targets)[0][0, :2]))
    assert per_token == pytest.approx(plain, rel=1e-6)


def test_default_loss_is_a_sum_over_weighted_tokens():
    loss, _ = loss_and_metrics(LOGITS, TARGETS, jnp.array([[1.0, 0.5]]))
    assert float(loss) == pytest.approx(NLL[0] + 0.5 * NLL[1], rel=1e-6)


def test_accuracy_counts_the_first_largest_logit_as_argmax_does():
    """Ties (common in bfloat16 logits) go to the first index, as jnp.argmax's (T5X's)."""
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.integers(-3, 3, (4, 9, 11)), jnp.bfloat16)  # many ties
    targets = jnp.asarray(rng.integers(0, 11, (4, 9)))
    targets = targets.at[:, :4].set(jnp.argmax(logits[:, :4], axis=-1))  # some right
    weights = jnp.ones((4, 9))
    _, metrics = loss_and_metrics(logits, targets, weights)
    expected = np.mean(np.argmax(np.asarray(logits, np.float32), axis=-1) == np.asarray(targets))
    assert float(metrics["accuracy"]) == pytest.approx(expected, rel=1e-6)
    assert 0.4 < expected < 1  # the first positions right, ties decided by position
