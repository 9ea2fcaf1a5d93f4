"""Decode lanes: continuous batching's slots split into pools that step side by side.

A lane is one pool of decode slots with its own device state; the server runs each lane's
ticks on its own device thread (continuous.ContinuousBatcher), so while one lane streams its
tokens and plans its next tick on the host, another lane's step runs on XLA's threads. Lanes
share the engine's parameters and compiled programs: every lane's pool has the same shapes,
so a second lane compiles nothing. One lane is the default: on 2 cores, two lanes gave the
demo model's p99 latency 0.89-1.04x one lane's and T5 1.1 small's 1.44x, for 5-13% more CPU
(docs/serving-profile.md, "Decode lanes").
"""

from __future__ import annotations

import jax
import numpy as np

from t5forge.serving.settings import ServerSettings
from t5forge.serving.slots import SlotDecoder
from t5forge.serving.stepwise import RowOptions


class SlotLane:
    """One pool of decode slots: its device state (`pool`, each slot's input bucket) and the
    calls that change it. Only its own device thread calls it."""

    def __init__(self, engine, slots: SlotDecoder):
        """`engine`: the Engine whose parameters, buckets and programs the lane uses."""
        self.engine = engine
        self.settings: ServerSettings = engine.settings
        self.slots = slots
        self.pool = None
        self.slot_widths = np.zeros(slots.slots, int)  # each slot's input bucket

    def _slot_pool(self) -> dict:
        """The slots' device state (made empty on first use, or after a failed call consumed
        it)."""
        if self.pool is None:
            self.pool = self.slots.empty_pool(self.engine.params)
        return self.pool

    def admit(
        self,
        rows: list[list[int]],
        options: list[RowOptions],
        slot_ids: list[int],
        compile_only: bool = False,
    ):
        """Encodes new rows and places them in free slots; rows of one length bucket are
        encoded together (the encoder runs on its own, not beside the decoding steps).
        `compile_only` compiles the programs this would run instead (warm-up)."""
        engine = self.engine
        by_width: dict[int, list[int]] = {}
        for i, row in enumerate(rows):
            by_width.setdefault(engine.input_buckets.fit(len(row)), []).append(i)
        for width, members in by_width.items():
            features, _ = engine.model.predict_features(
                [rows[i] for i in members], width, engine.batch_buckets.fit(len(members))
            )
            self.pool = self.slots.admit(
                engine.params,
                self._slot_pool(),
                features,
                [slot_ids[i] for i in members],
                [options[i] for i in members],
                compile_only,
            )
            if not compile_only:
                self.slot_widths[[slot_ids[i] for i in members]] = width

    def compaction(self, live: np.ndarray) -> list[tuple[int, int]]:
        """(source, target) slot moves that put every occupied slot (`live` bool[slots])
        inside the step bucket of their count, so that a step covers the live rows and not
        the holes rows that ended left below the last one; [] when they fit already."""
        occupied = np.flatnonzero(live)
        if not len(occupied):
            return []
        rows = self.engine.batch_buckets.fit(len(occupied))
        holes = np.flatnonzero(~live[:rows])
        return [(int(s), int(t)) for s, t in zip(occupied[occupied >= rows], holes)]

    def max_moves(self) -> int:
        """The most moves one compaction can make in this pool (0: never compacts)."""
        slots, buckets = self.slots.slots, self.engine.batch_buckets
        return max(min(n, slots - buckets.fit(n)) for n in range(1, slots + 1))

    def compact(self, moves: list[tuple[int, int]], compile_only: bool = False) -> None:
        """Moves slots' rows as `compaction` planned (one device call, its number of moves
        padded to a batch bucket). `compile_only` compiles the program instead (warm-up)."""
        count = self.engine.batch_buckets.fit(len(moves))
        self.pool = self.slots.move(self._slot_pool(), moves, count, compile_only)
        if not compile_only:
            for source, target in moves:
                self.slot_widths[target] = self.slot_widths[source]

    def step(self, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One token for every occupied slot (`live` bool[slots]): (tokens, log-likelihoods)
        of the first slots up to the batch bucket holding the last occupied one, reading the
        encoder outputs up to the widest occupied row's length bucket."""
        return self._steps(live, 1)

    def steps(self, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`tokens_per_tick` tokens for every occupied slot in one device call, as `step`:
        (tokens, log-likelihoods), each [tokens_per_tick, rows]."""
        return self._steps(live, self.settings.tokens_per_tick)

    def step_rows(self, live: np.ndarray, ticks: int) -> int:
        """Slots a step of `ticks` tokens for the occupied ones (`live` bool[slots]) covers:
        the first, up to the bucket holding the last occupied one."""
        occupied = np.flatnonzero(live)
        engine = self.engine
        buckets = engine.step_buckets if ticks == 1 else engine.batch_buckets
        return buckets.fit(int(occupied[-1]) + 1 if len(occupied) else 1)

    def _steps(self, live: np.ndarray, ticks: int):
        occupied = np.flatnonzero(live)
        rows = self.step_rows(live, ticks)
        width = max(self.slot_widths[occupied], default=self.engine.input_buckets.sizes()[0])
        self.pool, tokens, log_likelihood = self.slots.step(
            self.engine.params, self._slot_pool(), live[:rows], int(width), ticks=ticks
        )
        return jax.device_get((tokens, log_likelihood))

    def compile_step(self, rows: int, width: int, ticks: int) -> None:
        """The step of the first `rows` slots at encoder width `width`, making `ticks` tokens
        per call, compiled (warm-up)."""
        live = np.ones((rows,), bool)
        self.slots.step(
            self.engine.params, self._slot_pool(), live, width, compile_only=True, ticks=ticks
        )
