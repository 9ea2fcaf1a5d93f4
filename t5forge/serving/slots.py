"""Continuous batching's device side: a fixed set of decode slots that rows join and leave.

An encoder-decoder's decoding state per row is two caches: the decoder's self-attention keys
and values (written one position per step) and the cross-attention keys and values of its
encoder output (written once). Here both live in a pool of `slots` rows on the device. `admit`
encodes a batch of new inputs (the encoder runs on its own, at the batch's length bucket),
pads their cross-attention entries to the pool's encoder width and writes them, with empty
self-attention caches and the rows' options, into free slots. `step` makes the next token of
every slot at that slot's own position: the model's one-step function is mapped over the
slots (jax.vmap), so each row sees exactly the positions, masks and relative-position biases
it would see in a batch of its own, and rows that started at different steps share one
program. One admission program per (batch, length) bucket of new inputs, one step program per
(leading slots, encoder width) bucket: the occupied slots are kept at the front (new rows take
the lowest free slots, and when rows that ended leave holes, `move` compacts the rows above
the live-row bucket into them), and a step reads the encoder outputs only up to the widest
occupied row's length bucket. The pool is two parts so that a step costs what its occupied
slots use: what every step rewrites (donated; a call writes back only the cache positions it
wrote) and the cross-attention entries and options that only admissions write (read in place;
writing them back made every step copy the whole pool).

Decoder-only models (whose prompts are prefilled into the self-attention cache) are not
handled here; the server decodes them in static batches.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from t5forge.models.decoding import DecodingCache
from t5forge.serving.executables import ExecutableStore, on_device
from t5forge.serving.stepwise import RowOptions, choose_next, option_arrays


@functools.lru_cache(maxsize=256)
def _live_on_device(live: bytes) -> jax.Array:
    """A step's `live` mask (bool[rows] as bytes) on the device, copied once per pattern: a
    fresh copy took 60-140 us of each step's 0.3-0.5 ms dispatch (demo model, 2-core EPYC),
    and a server's steps repeat a few patterns."""
    return on_device(np.frombuffer(live, bool))


def _written_back(full, part, *, started, ticks: int):
    """The pool's self-attention cache `full` [slots, heads, L, D] with the positions a call
    of `ticks` tokens wrote into its first rows' cache `part` [rows, heads, L, D] copied in:
    `ticks` positions per row from where each row `started` (the last ones when that runs past
    the cache: a row at its last position rewrites it). Writing back the whole of `part`
    copied every stepped row's cache (L positions) per call, most of a one-token tick's
    copies (docs/serving-profile.md)."""
    length = full.shape[2]
    window = min(ticks, length)
    positions = jnp.minimum(started, length - window)[:, None] + jnp.arange(window)
    rows = jnp.arange(part.shape[0])[:, None]
    return full.at[rows, :, positions].set(part[rows, :, positions])


class SlotDecoder:
    """Decode slots for one encoder-decoder model (`t5forge.api.Model.t5x_model`)."""

    def __init__(
        self,
        t5x_model,
        slots: int,
        cache_length: int,
        encoder_width: int,
        programs: ExecutableStore | None = None,
    ):
        """`programs`: where its executables are kept (the server's store; else in memory)."""
        self.model = t5x_model
        self.eos_id = t5x_model.eos_id
        self.programs = programs or ExecutableStore.in_memory()
        self.slots = slots
        self.cache_length = cache_length
        self.encoder_width = encoder_width

    # Static `self` in the jitted methods: equal decoders share their compilations.
    def _key(self):
        return (id(self.model), self.slots, self.cache_length, self.encoder_width)

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        return isinstance(other, SlotDecoder) and other._key() == self._key()

    def _cache_of(self, params, encoder_tokens):
        _, cache, _ = self.model.decoding_state(
            params, {"encoder_input_tokens": encoder_tokens}, self.cache_length
        )
        return cache

    def empty_pool(self, params) -> dict:
        """All slots free: zero caches of the pool's shapes, zero options. The pool is two
        parts: what every step rewrites ("moving": self-attention caches, last tokens,
        positions) and what only admissions write ("fixed": cross-attention entries, options),
        so that a step neither copies nor writes back the large fixed part."""
        tokens = jax.ShapeDtypeStruct((self.slots, self.encoder_width), jnp.int32)
        shapes = jax.eval_shape(self._cache_of, params, tokens)
        zeros = jax.tree.map(lambda s: on_device(np.zeros(s.shape, s.dtype)), shapes)
        return {
            "moving": {
                "cache": zeros.per_row,
                "token": on_device(np.zeros((self.slots,), np.int32)),
                "step": on_device(np.zeros((self.slots,), np.int32)),
            },
            "fixed": {
                "per_input": zeros.per_input,
                "lineage": zeros.lineage,
                **option_arrays([RowOptions(0)] * self.slots),
            },
        }

    @functools.partial(jax.jit, static_argnums=(0,), donate_argnums=(2,))
    def _admit(self, params, pool, encoder_tokens, slot_ids, options):
        new = self._cache_of(params, encoder_tokens)

        def write(pool_leaf, new_leaf):
            # Cross-attention entries and masks are padded from the batch's length bucket to
            # the pool's encoder width (masked positions weigh exactly 0 in the softmax).
            padding = [(0, 0)] + [
                (0, p - n) for p, n in zip(pool_leaf.shape[1:], new_leaf.shape[1:])
            ]
            # Padding rows of the batch carry slot id `slots` and are dropped.
            return pool_leaf.at[slot_ids].set(jnp.pad(new_leaf, padding), mode="drop")

        fresh = {
            "moving": {
                "cache": new.per_row,
                "token": jnp.zeros_like(slot_ids),
                "step": jnp.zeros_like(slot_ids),
            },
            "fixed": {"per_input": new.per_input, "lineage": new.lineage, **options},
        }
        return jax.tree.map(write, pool, fresh)

    def admit(
        self,
        params,
        pool: dict,
        features: dict,
        slot_ids: list[int],
        rows: list[RowOptions],
        compile_only: bool = False,
    ):
        """Encodes `features` (a padded batch whose first len(slot_ids) rows are real) and
        places row i in slot slot_ids[i]; the pool given is consumed (donated). With
        `compile_only` the program is compiled, not run, and the pool is returned untouched."""
        batch = features["encoder_input_tokens"].shape[0]
        padded_ids = list(slot_ids) + [self.slots] * (batch - len(slot_ids))
        padded_rows = list(rows) + [RowOptions(0)] * (batch - len(rows))
        arguments = (
            params,
            pool,
            on_device(features["encoder_input_tokens"], np.int32),
            on_device(padded_ids, np.int32),
            option_arrays(padded_rows),
        )
        if compile_only:
            self.programs.prepare("admit", type(self)._admit, self, *arguments)
            return pool
        return self.programs.run("admit", type(self)._admit, self, *arguments)

    @functools.partial(jax.jit, static_argnums=(0,), donate_argnums=(1,))
    def _move(self, pool, sources, targets):
        # Targets past the last slot are padding and dropped; sources and targets are
        # disjoint, so every row is read before any is written.
        return jax.tree.map(lambda leaf: leaf.at[targets].set(leaf[sources], mode="drop"), pool)

    def move(self, pool: dict, moves: list[tuple[int, int]], count: int, compile_only=False):
        """The pool with each (source, target) slot's row moved to its target (its caches,
        last token, position and options: the row decodes on exactly as before), for
        compaction; the pool given is consumed (donated). `count` (>= len(moves), >= 1) is
        the program's number of moves (a bucket). With `compile_only` the program is compiled,
        not run, and the pool is returned untouched."""
        padding = [(0, self.slots)] * (count - len(moves))
        sources, targets = zip(*(list(moves) + padding))
        arguments = (pool, on_device(sources, np.int32), on_device(targets, np.int32))
        if compile_only:
            self.programs.prepare("move", type(self)._move, self, *arguments)
            return pool
        return self.programs.run("move", type(self)._move, self, *arguments)

    @functools.partial(
        jax.jit,
        static_argnums=(0,),
        static_argnames=("rows", "width", "ticks"),
        donate_argnums=(2,),
    )
    def _step(self, params, full_moving, full_fixed, live, *, rows, width, ticks):
        # Only the first `rows` slots are stepped (the occupied ones are kept at the front),
        # and their cross-attention reads only the first `width` encoder positions (the widest
        # occupied row's length bucket; the rest are padding): a light load or short inputs
        # pay for what they use, not for the pool's full size.
        def first_rows(tree):
            return jax.tree.map(lambda leaf: leaf[:rows], tree)

        used = jax.eval_shape(
            self._cache_of, params, jax.ShapeDtypeStruct((rows, width), jnp.int32)
        )
        fixed = {
            name: first_rows(value)
            if name != "per_input"
            else jax.tree.map(
                lambda leaf, shape: leaf[tuple(slice(0, n) for n in shape.shape)],
                value,
                used.per_input,
            )
            for name, value in full_fixed.items()
        }
        dummy = jnp.zeros((1, width), jnp.int32)
        # Only the step function is used; XLA drops the unused encoding of the dummy row. A
        # lone row reads its self-attention caches through a select (DecoderLayer).
        _, _, tokens_to_logits = self.model.decoding_state(
            params, {"encoder_input_tokens": dummy}, self.cache_length, select_cache_reads=rows == 1
        )

        def one_row(token, per_row, per_input, lineage, step):
            cache = jax.tree.map(
                lambda leaf: leaf[None], DecodingCache(per_row, per_input, lineage)
            )
            logits, cache = tokens_to_logits(token[None, None], cache, step)
            return logits[0], jax.tree.map(lambda leaf: leaf[0], cache.per_row)

        # Free slots decode greedily (their tokens are ignored), so an all-greedy pool never
        # pays for sampling because a sampled row once sat in a now-free slot.
        temperature = jnp.where(live, fixed["temperature"], 0.0)

        def advance(moving, _=None):
            logits, stepped = jax.vmap(one_row)(
                moving["token"],
                moving["cache"],
                fixed["per_input"],
                fixed["lineage"],
                moving["step"],
            )
            keys = jax.vmap(lambda seed, step: jax.random.fold_in(jax.random.PRNGKey(seed), step))(
                fixed["seeds"], moving["step"]
            )
            chosen, log_likelihood = choose_next(
                logits.astype(jnp.float32),
                keys,
                temperature,
                fixed["top_k"],
                fixed["top_p"],
                fixed["scored"] & live,
            )
            moving = {
                "cache": stepped,
                "token": chosen,
                # Free slots stay at the last position instead of running past the cache.
                "step": jnp.minimum(moving["step"] + 1, self.cache_length - 1),
            }
            return moving, (chosen, log_likelihood)

        moving = first_rows(full_moving)
        started = moving["step"]
        if ticks == 1:
            moving, (tokens, log_likelihood) = advance(moving)
        else:
            # Several tokens in one call: the host's per-call cost is paid once, and what
            # every step would redo (reading the pool's fixed part) is done once per tick.
            moving, (tokens, log_likelihood) = jax.lax.scan(advance, moving, length=ticks)
        full_moving = {
            "cache": jax.tree.map(
                functools.partial(_written_back, started=started, ticks=ticks),
                full_moving["cache"],
                moving["cache"],
            ),
            **{
                name: jax.lax.dynamic_update_slice_in_dim(full_moving[name], moving[name], 0, 0)
                for name in ("token", "step")
            },
        }
        return full_moving, tokens, log_likelihood

    def step(
        self,
        params,
        pool: dict,
        live: np.ndarray,
        width: int | None = None,
        compile_only: bool = False,
        ticks: int = 1,
    ):
        """(new pool, next token of each of the first len(live) slots, its log-likelihood);
        `live` bool[rows] says which of them are occupied (the rest are not stepped), `width`
        is at least the encoder length of every occupied one (the pool's width if None).
        With `ticks` > 1 each slot makes that many tokens in one call: tokens and
        log-likelihoods are then [ticks, rows] (a row that ended meanwhile runs on; the
        caller drops what follows its end). With `compile_only` the program is compiled,
        not run, and None is returned."""
        arguments = (
            params,
            pool["moving"],
            pool["fixed"],
            _live_on_device(np.asarray(live, bool).tobytes()),
        )
        static = {"rows": len(live), "width": width or self.encoder_width, "ticks": ticks}
        if compile_only:
            self.programs.prepare("step", type(self)._step, self, *arguments, **static)
            return None
        moving, tokens, log_likelihood = self.programs.run(
            "step", type(self)._step, self, *arguments, **static
        )
        return {**pool, "moving": moving}, tokens, log_likelihood
