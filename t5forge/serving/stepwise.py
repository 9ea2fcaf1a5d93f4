"""Greedy and sampled decoding one token per call, each row with its own options.

The library's decoders (t5forge.models.decoding) run the whole loop as one XLA program with
the sampling settings compiled in. A server needs what they cannot give: tokens as they are
made (to stream them), rows with different settings in one batch (greedy beside top-p at
temperature 0.7, each with its own seed and length budget), and a way to stop rows whose
client left. Here one jitted call starts a batch (encodes the inputs, or prefills a
decoder-only prompt) and one jitted call makes the next token of every row from that row's
temperature, top_k, top_p and seed; the host loop between the two streams tokens and ends
rows. One compilation per batch shape serves every mix of options.

Scores are the log-likelihood of each generated token under the model (temperature 1, no
filtering), so a returned score equals what /v1/score gives for the same output tokens.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

# The blocked inverse CDF, the bisection for the top-p floor and the prompt buffer are the
# library decoders' own; reusing them keeps one definition of each sampling rule.
from t5forge.models.decoding import (
    MIN_TEMPERATURE,
    NEG_INF,
    _inverse_cdf_pick,
    _prompt_buffer,
    _top_p_threshold,
    first_argmax,
)
from t5forge.serving.executables import ExecutableStore
from t5forge.serving.tick_costs import TickCosts

# Per-row top_k is read at run time, so the top-k candidates are taken with this static width.
TOP_K_LIMIT = 64


@dataclasses.dataclass(frozen=True)
class RowOptions:
    """One row's decoding: temperature 0 means greedy; `scored`: its tokens' log-likelihood
    is computed (a batch whose rows all leave it off skips the full-vocabulary softmax)."""

    max_new_tokens: int
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 0.0
    seed: int = 0
    scored: bool = True


@dataclasses.dataclass
class Decoded:
    """A row's generated tokens (EOS included when it ended with one) and their log-likelihood."""

    tokens: list[int]
    log_likelihood: float


# The step programs' per-row option arguments, in the order they take them.
OPTION_NAMES = ("seeds", "temperature", "top_k", "top_p", "scored")


def in_order(options: dict) -> list:
    """`option_arrays`' entries in OPTION_NAMES' order (a dict through jax.device_put comes
    back with its keys sorted)."""
    return [options[name] for name in OPTION_NAMES]


def option_arrays(rows: list[RowOptions]) -> dict:
    """The rows' options as the arrays the step functions read (one entry per row)."""
    return {
        "seeds": np.array([o.seed % 2**32 for o in rows], np.uint32),
        "temperature": np.array([o.temperature for o in rows], np.float32),
        "top_k": np.array([o.top_k for o in rows], np.int32),
        "top_p": np.array([o.top_p for o in rows], np.float32),
        "scored": np.array([o.scored for o in rows], bool),
    }


def choose_next(logits, keys, temperature, top_k, top_p, scored):
    """Next token and its model log-likelihood (0 where not `scored`) for every row, from
    per-row options."""
    greedy = first_argmax(logits)
    sampling = temperature > MIN_TEMPERATURE

    def sample(_):
        scaled = logits / jnp.where(sampling, temperature, 1.0)[:, None]
        kth = jax.lax.top_k(scaled, min(TOP_K_LIMIT, logits.shape[-1]))[0]
        floor = jnp.take_along_axis(kth, jnp.clip(top_k - 1, 0, kth.shape[-1] - 1)[:, None], 1)
        scaled = jnp.where((top_k[:, None] > 0) & (scaled < floor), NEG_INF, scaled)
        probs = jax.nn.softmax(scaled, axis=-1)
        nucleus_floor = jnp.where(top_p > 0, _top_p_threshold(probs, top_p), 0.0)
        kept = jnp.where(probs >= nucleus_floor[:, None], probs, 0.0)
        uniform = jax.vmap(lambda key: 1.0 - jax.random.uniform(key, (), jnp.float32))(keys)
        return jnp.where(sampling, _inverse_cdf_pick(kept, uniform), greedy)

    # An all-greedy batch skips the sampling work (top-k, bisection) entirely.
    tokens = jax.lax.cond(jnp.any(sampling), sample, lambda _: greedy, None)

    def log_likelihood(_):
        log_probs = jax.nn.log_softmax(logits, axis=-1)
        return jnp.take_along_axis(log_probs, tokens[:, None], axis=-1)[:, 0]

    # Likewise a batch where no row asked for scores skips the log-softmax.
    scores = jax.lax.cond(
        jnp.any(scored), log_likelihood, lambda _: jnp.zeros(tokens.shape, logits.dtype), None
    )
    return tokens, jnp.where(scored, scores, 0.0)


class StepDecoder:
    """Starts batches and steps them for one model (`t5forge.api.Model.t5x_model`)."""

    def __init__(
        self, t5x_model, programs: ExecutableStore | None = None, tokens_per_call: int = 1
    ):
        """`programs`: where its executables are kept (the server's store; else in memory);
        `tokens_per_call`: tokens each row makes per device call while the longest budget
        allows, or when that costs less than its last tokens one call each (tick_costs); the
        host's per-call cost is then paid once for them."""
        self.model = t5x_model
        self.eos_id = t5x_model.eos_id
        self.programs = programs or ExecutableStore.in_memory()
        self.tokens_per_call = tokens_per_call
        self.costs = TickCosts(tokens_per_call)  # when the last tokens take one call

    # The jitted methods take self as a static argument: decoders of one model share their
    # compilations (a second server on the same model compiles nothing new).
    def __hash__(self):
        return hash(id(self.model))

    def __eq__(self, other):
        return isinstance(other, StepDecoder) and other.model is self.model

    @functools.partial(jax.jit, static_argnums=(0,), static_argnames=("cache_length",))
    def _start(self, params, features, *, cache_length):
        prompt, cache, _ = self.model.decoding_state(params, features, cache_length)
        return cache, _prompt_buffer(prompt)

    @functools.partial(jax.jit, static_argnums=(0,), static_argnames=("cache_length", "ticks"))
    def _step(
        self,
        params,
        features,
        cache,
        buffer,
        token,
        step,
        seeds,
        temperature,
        top_k,
        top_p,
        scored,
        *,
        cache_length,
        ticks,
    ):
        # Only the step function is used here; XLA drops the unused encoding/prefill.
        _, _, tokens_to_logits = self.model.decoding_state(params, features, cache_length)

        def advance(carry, offset):
            token, cache = carry
            position = step + offset
            logits, cache = tokens_to_logits(token[:, None], cache, position)
            keys = jax.vmap(lambda seed: jax.random.fold_in(jax.random.PRNGKey(seed), position))(
                seeds
            )
            chosen, log_likelihood = choose_next(
                logits.astype(jnp.float32), keys, temperature, top_k, top_p, scored
            )
            forced = jax.lax.dynamic_index_in_dim(buffer, position + 1, axis=1, keepdims=False)
            generated = forced == 0
            token = jnp.where(generated, chosen, forced)
            return (token, cache), (token, generated, jnp.where(generated, log_likelihood, 0.0))

        # Several tokens per call (a scan) pay the host's per-call cost once for all of them.
        if ticks == 1:
            (token, cache), made = advance((token, cache), 0)
            made = jax.tree.map(lambda leaf: leaf[None], made)
        else:
            (token, cache), made = jax.lax.scan(advance, (token, cache), jnp.arange(ticks))
        return token, *made, cache

    def compile(self, params, features: dict, cache_length: int) -> None:
        """Compiles decode's programs for this padded batch's shapes without running them
        (a server's warm-up; decode then reuses them)."""
        batch = next(iter(features.values())).shape[0]
        features, per_row = jax.device_put((features, option_arrays([RowOptions(0)] * batch)))
        start = self.programs.compile(
            "generate start", type(self)._start, self, params, features, cache_length=cache_length
        )
        cache, buffer = start.out_info
        for ticks in sorted({1, self.tokens_per_call}):
            self.programs.prepare(
                "generate step",
                type(self)._step,
                self,
                params,
                features,
                cache,
                buffer,
                jax.ShapeDtypeStruct((batch,), jnp.int32),
                jax.ShapeDtypeStruct((), jnp.int32),
                *in_order(per_row),
                cache_length=cache_length,
                ticks=ticks,
            )

    def decode(
        self,
        params,
        features: dict,
        cache_length: int,
        rows: list[RowOptions],
        emit: Callable[[int, int], None] | None = None,
        cancelled: Callable[[int], bool] | None = None,
    ) -> list[Decoded]:
        """Decodes the first len(rows) rows of a padded batch (extra rows are padding).

        emit(row, token) is called for each generated token as soon as it is known (after
        the device call that made it); cancelled(row) is asked after every call and ends
        that row early when true.
        """
        batch = next(iter(features.values())).shape[0]
        options = rows + [RowOptions(max_new_tokens=0)] * (batch - len(rows))
        # On the device once, not copied again by every step.
        features, per_row = jax.device_put((features, option_arrays(options)))
        cache, buffer = self.programs.run(
            "generate start", type(self)._start, self, params, features, cache_length=cache_length
        )
        token = np.zeros((batch,), np.int32)  # a host array: no program to compile
        results = [Decoded([], 0.0) for _ in rows]
        live = [o.max_new_tokens > 0 for o in rows]
        step = 0
        while step < cache_length and any(live):
            budget = max(o.max_new_tokens - len(r.tokens) for o, r in zip(rows, results))
            fits = step + self.tokens_per_call <= cache_length
            ticks = self.costs.choose(budget, batch) if fits else 1
            began = time.perf_counter()
            token, *made, cache = self.programs.run(
                "generate step",
                type(self)._step,
                self,
                params,
                features,
                cache,
                buffer,
                token,
                np.int32(step),  # a host scalar, as `token`
                *in_order(per_row),
                cache_length=cache_length,
                ticks=ticks,
            )
            made = jax.device_get(made)
            if step:  # the first call's time includes the start program's (dispatched async)
                self.costs.record(ticks, batch, time.perf_counter() - began)
            step += ticks
            for tokens, generated, log_likelihood in zip(*made):
                for row, result in enumerate(results):
                    if not live[row] or not generated[row]:
                        continue
                    result.tokens.append(int(tokens[row]))
                    result.log_likelihood += float(log_likelihood[row])
                    if emit is not None:
                        emit(row, int(tokens[row]))
                    if tokens[row] == self.eos_id or len(result.tokens) >= rows[row].max_new_tokens:
                        live[row] = False
            if cancelled is not None:
                live = [alive and not cancelled(row) for row, alive in enumerate(live)]
        return results
