"""Decoding loops against toy step functions whose right answers are known.

The toy models are real step functions (same contract as the T5 decoder's): a first-order
Markov chain (T5X's golden beam-search case), fixed next-token distributions (sampling
statistics), and a model whose logits depend on the whole prefix kept in its cache, so a
decoder that forgets to reorder the cache with the beams gets different answers.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5forge.errors import ConfigError
from t5forge.models import decoding

EOS = 1


@functools.cache
def jitted(decode_fn, tokens_to_logits, **static):
    """The decoder under jax.jit, as models call it: inputs, cache and rng are traced.

    Cached so that tests sharing a setting share one compilation.
    """
    return jax.jit(functools.partial(decode_fn, tokens_to_logits=tokens_to_logits, **static))


# ----------------------------------------------------------------------------- toy models


class PrefixModel:
    """Next-token logits depend on every token fed so far, which lives only in the cache.

    PAD (0) is never emitted; eos_ramp makes EOS likelier at every step. The cache also holds a per-example bias (leading axis = batch, so it must be expanded
    batch-major) and a 0-d counter that must reach the step function untouched.
    """

    def __init__(self, vocab=6, length=6, batch=2, sharpness=1.0, eos_ramp=0.0, seed=0):
        keys = jax.random.split(jax.random.PRNGKey(seed), 3)
        self.vocab, self.length, self.batch, self.eos_ramp = vocab, length, batch, eos_ramp
        self.last_token_weights = sharpness * jax.random.normal(keys[0], (vocab, vocab))
        self.history_weights = sharpness * jax.random.normal(keys[1], (vocab, vocab))
        self.example_bias = sharpness * jax.random.normal(keys[2], (batch, vocab))
        self._step = jax.jit(self.tokens_to_logits)
        self._known_log_probs = {}

    def init_cache(self, example_bias=None):
        bias = self.example_bias if example_bias is None else example_bias
        return {
            "history": jnp.zeros((len(bias), self.length + 1), jnp.int32),
            "example_bias": bias,
            "calls": jnp.zeros((), jnp.int32),
        }

    def tokens_to_logits(self, token_ids, cache, step):
        assert cache["calls"].ndim == 0, "0-d cache leaves must not be expanded or gathered"
        history = jax.lax.dynamic_update_index_in_dim(
            cache["history"], token_ids[:, 0], step, axis=1
        )
        seen = jnp.arange(self.length + 1) <= step
        counts = jnp.sum(jax.nn.one_hot(history, self.vocab) * seen[None, :, None], axis=1)
        logits = (
            self.last_token_weights[token_ids[:, 0]]
            + counts @ self.history_weights
            + cache["example_bias"]
        )
        logits = logits.at[:, 0].set(decoding.NEG_INF)  # like a trained model, never emit PAD
        logits = logits.at[:, EOS].add(self.eos_ramp * (step - self.length / 2))
        new_cache = {
            "history": history,
            "example_bias": cache["example_bias"],
            "calls": cache["calls"] + 1,
        }
        return logits, new_cache

    def next_log_probs(self, prefix, row):
        """log p(next | prefix) for example `row`, feeding the prefix (BOS first) token by token."""
        key = (tuple(prefix), row)
        if key not in self._known_log_probs:
            cache = self.init_cache(self.example_bias[row : row + 1])
            for step, token in enumerate(prefix):
                logits, cache = self._step(jnp.array([[token]], jnp.int32), cache, step)
            logits = np.asarray(logits[0], np.float64)
            self._known_log_probs[key] = logits - np.logaddexp.reduce(logits)
        return self._known_log_probs[key]

    def greedy_reference(self, inputs, max_decode_steps=None):
        """Plain-Python argmax decoding: prompt tokens forced, generation stops at EOS."""
        inputs = np.asarray(inputs)
        length = inputs.shape[1]
        out = np.zeros_like(inputs)
        for row in range(inputs.shape[0]):
            prompt = [int(t) for t in inputs[row, 1:] if t != 0]
            limit = length if max_decode_steps is None else len(prompt) + max_decode_steps
            prefix = [0] + prompt
            while len(prefix) - 1 < min(limit, length):
                prefix.append(int(np.argmax(self.next_log_probs(prefix, row))))
                if prefix[-1] == EOS:
                    break
            out[row, : len(prefix) - 1] = prefix[1:]
        return out

    def sequence_log_prob(self, tokens, row, prompt_length=0):
        """Sum of log p of the generated tokens of a returned sequence, and its full length."""
        prefix, total = [0], 0.0
        for position, token in enumerate(int(t) for t in tokens):
            if token == 0:
                break
            if position >= prompt_length:
                total += self.next_log_probs(prefix, row)[token]
            prefix.append(token)
            if token == EOS and position >= prompt_length:
                break
        return total, len(prefix) - 1


def fixed_distribution_model(probs):
    """A step function whose next-token distribution is `probs` at every step."""
    logits = jnp.log(jnp.asarray(probs, jnp.float32))

    def tokens_to_logits(token_ids, cache, step):
        del step
        return jnp.broadcast_to(logits, (token_ids.shape[0], logits.shape[0])), cache

    return tokens_to_logits


# ------------------------------------------------------------------ T5X golden: Markov beam


def markov_tokens_to_logits(token_ids, cache, step):
    """T5X's toy first-order Markov model over PAD, A, B, START, END (EOS = 4).

    From START (step 0) the chain moves to A or B for free; between steps 1 and 5 the edge
    potentials alternate +1/-1 so the best paths are AABBA and BBAAB; A or B then go to END.
    """
    neg = decoding.NEG_INF
    ab_potentials = np.array([[[1, -1], [-1, 1]], [[-1, 1], [1, -1]]] * 2, np.float32)
    potentials = np.full((6, 5, 5), neg, np.float32)
    potentials[1:5, 1:3, 1:3] = ab_potentials
    potentials[0, 3, 1:3] = 0
    potentials[5, 1:3, 4] = 0
    potentials[:, 0, :] = 0
    first = np.array([neg, neg, neg, 0, neg], np.float32)
    logits = jnp.asarray(potentials)[jnp.maximum(step - 1, 0), token_ids[:, 0]]
    return jnp.where(step == 0, jnp.asarray(first), logits), cache


def test_beam_search_markov_golden_matches_t5x():
    states = ["PAD", "A", "B", "START-", "-END"]
    search = jitted(
        decoding.beam_search, markov_tokens_to_logits, eos_id=4, num_decodes=2, alpha=0.0
    )
    sequences, scores = search(jnp.zeros((2, 7), jnp.int32), {})
    strings = ["".join(states[t] for t in sequences[0, beam]) for beam in range(2)]
    assert strings == ["START-AABBA-END", "START-BBAAB-END"]
    np.testing.assert_allclose(
        scores[0], [np.log(0.5) + 4 * np.log(1 / (1 + np.exp(-2)))] * 2, rtol=1e-5
    )
    assert np.all(np.diff(np.asarray(scores), axis=1) >= 0)


# ------------------------------------------------------------------- greedy and sampling


def sample(model, inputs, rng=None, **static):
    decode = jitted(decoding.temperature_sample, model.tokens_to_logits, eos_id=EOS, **static)
    return decode(jnp.asarray(inputs, jnp.int32), model.init_cache(), rng=rng)


@pytest.fixture(scope="module")
def prefix_model():
    return PrefixModel(vocab=6, length=6, batch=3, seed=10)


@pytest.fixture(scope="module")
def greedy_expected(prefix_model):
    expected = prefix_model.greedy_reference(np.zeros((3, 6), np.int32))
    # The case is only interesting if some row stops early at EOS and is padded after it.
    assert any(EOS in row[:-1] for row in expected.tolist())
    return expected


def test_greedy_equals_stepwise_argmax(prefix_model, greedy_expected):
    sequences, log_probs = sample(prefix_model, np.zeros((3, 6)))
    np.testing.assert_array_equal(sequences[:, 0], greedy_expected)
    np.testing.assert_array_equal(log_probs, 0.0)


@pytest.mark.parametrize(
    "settings",
    [
        {"temperature": 0.0, "topk": 0},
        {"temperature": 5e-5, "topk": 0, "topp": 0.9},
        {"temperature": 0.7, "topk": 1},
        {"temperature": 1.0, "topk": 0, "topp": 1e-6},
    ],
    ids=["temperature-0", "temperature-below-min", "topk-1", "tiny-topp"],
)
def test_sampling_settings_that_reduce_to_greedy(prefix_model, greedy_expected, settings):
    sequences, _ = sample(
        prefix_model, np.zeros((3, 6)), jax.random.PRNGKey(7), num_decodes=2, **settings
    )
    for decode in range(2):
        np.testing.assert_array_equal(sequences[:, decode], greedy_expected)


def test_sampling_is_deterministic_for_a_fixed_rng(prefix_model):
    settings = {"num_decodes": 8, "topk": 0, "temperature": 1.5}
    first = sample(prefix_model, np.zeros((3, 6)), jax.random.PRNGKey(1), **settings)
    again = sample(prefix_model, np.zeros((3, 6)), jax.random.PRNGKey(1), **settings)
    other = sample(prefix_model, np.zeros((3, 6)), jax.random.PRNGKey(2), **settings)
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert not np.array_equal(first[0], other[0])


def test_sampled_log_probs_are_sums_over_generated_tokens(prefix_model):
    inputs = np.array([[0, 3, 4, 0, 0, 0], [0, 2, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]])
    sequences, log_probs = sample(
        prefix_model, inputs, jax.random.PRNGKey(4), num_decodes=3, topk=0
    )
    assert np.all(np.diff(np.asarray(log_probs), axis=1) >= 0), "best must come last"
    for row, prompt_length in enumerate([2, 1, 0]):
        for decode in range(3):
            tokens = np.asarray(sequences[row, decode])
            np.testing.assert_array_equal(
                tokens[:prompt_length], inputs[row, 1 : 1 + prompt_length]
            )
            expected, _ = prefix_model.sequence_log_prob(tokens, row, prompt_length)
            np.testing.assert_allclose(log_probs[row, decode], expected, rtol=1e-4, atol=1e-5)


PROBS = np.array([0.05, 0.1, 0.15, 0.3, 0.4])


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"topk": 0}, PROBS),
        ({"topk": 2}, np.array([0, 0, 0, 0.3, 0.4]) / 0.7),
        ({"topk": 0, "topp": 0.75}, np.array([0, 0, 0.15, 0.3, 0.4]) / 0.85),
        ({"topk": 0, "temperature": 2.0}, np.sqrt(PROBS) / np.sqrt(PROBS).sum()),
    ],
    ids=["full", "topk-2", "topp-0.75", "temperature-2"],
)
def test_sampling_frequencies_follow_the_distribution(settings, expected):
    draws = 4000
    tokens_to_logits = fixed_distribution_model(PROBS)
    decode = jitted(
        decoding.temperature_sample, tokens_to_logits, eos_id=EOS, num_decodes=draws, **settings
    )
    sequences, log_probs = decode(jnp.zeros((1, 1), jnp.int32), {}, rng=jax.random.PRNGKey(0))
    tokens = np.asarray(sequences[0, :, 0])
    frequencies = np.bincount(tokens, minlength=len(PROBS)) / draws
    np.testing.assert_allclose(frequencies, expected, atol=0.035)
    assert np.all(expected[tokens] > 0), "a token outside the allowed set was sampled"
    np.testing.assert_allclose(log_probs[0], np.log(expected[tokens]), rtol=1e-4)


def test_prompt_is_forced_and_max_decode_steps_counts_after_it(prefix_model):
    inputs = np.array([[0, 3, 4, 5, 0, 0], [0, 2, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]])
    for max_decode_steps in (None, 2):
        sequences, _ = sample(prefix_model, inputs, max_decode_steps=max_decode_steps)
        expected = prefix_model.greedy_reference(inputs, max_decode_steps)
        np.testing.assert_array_equal(sequences[:, 0], expected)
    assert np.count_nonzero(np.asarray(sequences)[:, 0], axis=1).tolist() <= [5, 3, 2]


def recording_steps(tokens_to_logits, steps):
    """Wraps a step function so that every step it is called for is appended to `steps`."""

    def recorded(token_ids, cache, step):
        jax.debug.callback(lambda s: steps.append(int(s)), step)
        return tokens_to_logits(token_ids, cache, step)

    return recorded


def test_decoding_stops_once_every_row_has_emitted_eos():
    likely_eos = fixed_distribution_model([0.001, 0.99, 0.003, 0.003, 0.003])
    steps = []
    decode = jitted(
        decoding.temperature_sample, recording_steps(likely_eos, steps), eos_id=EOS, num_decodes=2
    )
    sequences, _ = decode(jnp.zeros((3, 10), jnp.int32), {}, rng=None)
    jax.effects_barrier()
    assert steps == [0]
    np.testing.assert_array_equal(sequences[:, :, 0], EOS)
    np.testing.assert_array_equal(sequences[:, :, 1:], 0)

    steps.clear()
    search = jitted(
        decoding.beam_search, recording_steps(likely_eos, steps), eos_id=EOS, num_decodes=2
    )
    sequences, _ = search(jnp.zeros((3, 10), jnp.int32), {})
    jax.effects_barrier()
    assert sorted(steps) == [0, 1]
    np.testing.assert_array_equal(sequences[:, -1, 0], EOS)


# --------------------------------------------------------------------------- beam search


def test_beam_search_with_one_beam_equals_greedy():
    # Greedy and one beam agree when greedy's path finishes and early EOS is unlikely.
    model = PrefixModel(vocab=6, length=6, batch=3, sharpness=2.0, eos_ramp=4.0, seed=6)
    inputs = np.zeros((3, 6), np.int32)
    search = jitted(decoding.beam_search, model.tokens_to_logits, eos_id=EOS, num_decodes=1)
    sequences, _ = search(jnp.asarray(inputs), model.init_cache())
    expected = model.greedy_reference(inputs)
    assert all(EOS in row for row in expected.tolist())
    np.testing.assert_array_equal(sequences[:, 0], expected)


def test_beam_scores_are_length_penalized_log_probs_with_cache_following_beams():
    model = PrefixModel(vocab=5, length=5, batch=2, eos_ramp=1.0, seed=0)
    alpha = 0.6
    search = jitted(
        decoding.beam_search, model.tokens_to_logits, eos_id=EOS, num_decodes=3, alpha=alpha
    )
    sequences, scores = search(jnp.zeros((2, 5), jnp.int32), model.init_cache())
    assert np.all(np.diff(np.asarray(scores), axis=1) >= 0), "best must come last"
    for row in range(2):
        assert len({tuple(s) for s in np.asarray(sequences[row]).tolist()}) == 3
        for beam in range(3):
            tokens = np.asarray(sequences[row, beam])
            assert EOS in tokens.tolist(), "every returned beam should be a finished one"
            log_prob, length = model.sequence_log_prob(tokens, row)
            expected = log_prob / decoding.length_penalty(length, alpha)
            np.testing.assert_allclose(scores[row, beam], expected, rtol=1e-4)


# T5X's force-prefix case: token 2 is likelier for example 0, token 3 for example 1; EOS never.
PER_EXAMPLE_LOGITS = jnp.array(
    [
        [-1e7, -1e10, -0.1, -0.9, -1e4, -1e4, -1e4, -1e4],
        [-1e7, -1e10, -0.9, -0.1, -1e4, -1e4, -1e4, -1e4],
    ],
    jnp.float32,
)
PROMPTED_INPUTS = jnp.array([[0, 7, 0, 0, 0], [0, 4, 5, 0, 0]], jnp.int32)


def per_example_tokens_to_logits(token_ids, cache, step):
    del token_ids, step
    return cache["logits"], cache


def test_beam_search_forces_prompts_like_t5x():
    search = jitted(
        decoding.beam_search, per_example_tokens_to_logits, eos_id=EOS, num_decodes=2, alpha=0.0
    )
    sequences, scores = search(PROMPTED_INPUTS, {"logits": PER_EXAMPLE_LOGITS})
    expected = np.array([[[7, 3, 2, 2, 2], [7, 2, 2, 2, 2]], [[4, 5, 2, 3, 3], [4, 5, 3, 3, 3]]])
    np.testing.assert_array_equal(sequences, expected)
    log_probs = np.asarray(jax.nn.log_softmax(PER_EXAMPLE_LOGITS))
    expected_scores = [
        [sum(log_probs[row, t] for t in beam[prompt:]) for beam in expected[row]]
        for row, prompt in enumerate([1, 2])
    ]
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)


def test_beam_search_max_decode_steps_counts_after_each_rows_prompt():
    search = jitted(
        decoding.beam_search,
        per_example_tokens_to_logits,
        eos_id=EOS,
        num_decodes=2,
        alpha=0.0,
        max_decode_steps=2,
    )
    sequences, scores = search(PROMPTED_INPUTS, {"logits": PER_EXAMPLE_LOGITS})
    # Nothing emits EOS, so each row returns its live beams, cut at prompt + 2 tokens.
    np.testing.assert_array_equal(np.count_nonzero(np.asarray(sequences), axis=2), [[3, 3], [4, 4]])
    np.testing.assert_array_equal(sequences[:, -1], [[7, 2, 2, 0, 0], [4, 5, 3, 3, 0]])
    log_probs = np.asarray(jax.nn.log_softmax(PER_EXAMPLE_LOGITS))
    np.testing.assert_allclose(scores[:, -1], [2 * log_probs[0, 2], 2 * log_probs[1, 3]], atol=1e-5)


def test_beam_log_softmax_is_jax_log_softmax_bit_for_bit():
    # Beam search ranks candidates by these values, so equal tokens need equal bits: checked
    # where beam search computes them, straight after a product, on an odd vocabulary with
    # ties (a row of equal logits) and a large-magnitude row; an even one and a single column.
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((6, 16)).astype(np.float32)
    hidden[1] = 0.0
    hidden[2] *= 1e3

    def log_probs(normalize, hidden, kernel):
        return normalize(
            jnp.dot(hidden.astype(jnp.bfloat16), kernel, preferred_element_type=jnp.float32)
        )

    for vocab in (1001, 1000, 1):
        kernel = jnp.asarray(rng.standard_normal((16, vocab)), jnp.bfloat16)
        ours = jax.jit(functools.partial(log_probs, decoding._log_softmax))(hidden, kernel)
        jaxs = jax.jit(functools.partial(log_probs, jax.nn.log_softmax))(hidden, kernel)
        np.testing.assert_array_equal(ours, jaxs)


# -------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ({"max_decode_steps": 0}, "max_decode_steps must be an integer >= 1"),
        ({"num_decodes": 0}, "num_decodes must be an integer >= 1"),
        ({"temperature": -0.5}, "temperature must be >= 0"),
        ({"topk": -1}, "topk must be an integer >= 0"),
        ({"topp": 1.5}, r"topp must be in \[0, 1\]"),
        ({"topp": -0.1, "topk": 0}, r"topp must be in \[0, 1\]"),
        ({"topk": 40, "topp": 0.9}, "use top-k or top-p, not both"),
    ],
)
def test_bad_sampling_settings_raise_config_error(call, message):
    with pytest.raises(ConfigError, match=message):
        decoding.temperature_sample(
            jnp.zeros((1, 4), jnp.int32), {}, fixed_distribution_model(PROBS), EOS, None, **call
        )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ({"max_decode_steps": -3}, "max_decode_steps must be an integer >= 1"),
        ({"num_decodes": 0}, "num_decodes must be an integer >= 1"),
    ],
)
def test_bad_beam_settings_raise_config_error(call, message):
    with pytest.raises(ConfigError, match=message):
        decoding.beam_search(
            jnp.zeros((1, 4), jnp.int32), {}, fixed_distribution_model(PROBS), EOS, **call
        )
