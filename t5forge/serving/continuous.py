"""Continuous (in-flight) batching: generation rows join and leave a running batch every step.

A static batch runs until its longest row ends: a request that arrives one step after it
started waits for all of it, and short outputs sit idle beside long ones. Here greedy and
sampled rows go to the decode slots of a lane instead (lanes.SlotLane, slots.SlotDecoder; the
service runs one ContinuousBatcher per lane). Every tick, on the lane's device thread: rows
waiting for a free slot are encoded and placed in the lowest free slots, rows above the live
rows' step bucket move down into holes that ended rows left (so a step covers the live rows,
not the highest slot ever used), then every occupied slot makes one token. Back on the event loop, tokens are streamed, rows that ended (EOS, their
max_new_tokens, or their client left) free their slots and settle their futures, and the next
tick admits whoever arrived meanwhile. A row's time to first token is its encoding plus one
step, whatever else is running.

A tick makes one token per slot while anyone waits (an admission, a queued job) and
`tokens_per_tick` tokens in one device call otherwise (as vLLM's multi-step scheduling): the
host's cost per call, which for small models outweighed the step itself, is paid once for
them, and a request arriving meanwhile waits at most that one call. When every row has
fewer tokens left, the tick makes whichever costs less by what such ticks have cost
(tick_costs.py): one such call, or one token at a time. Tokens are the same either way; rows
that end inside a tick have the rest of its tokens dropped.

Beam search and scoring still run as whole batches of their group (the Batcher's rule:
full, or max_wait_ms after the oldest arrived), between two ticks. Beam search keeps its
static batches because T5X's beam search is one compiled loop over whole beams (their
caches reordered as beams survive), not a per-row step that could share slots.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Hashable

import numpy as np

from t5forge.serving.batcher import Batcher, Job, RunBatch
from t5forge.serving.lanes import SlotLane
from t5forge.serving.stepwise import Decoded, RowOptions
from t5forge.serving.tick_costs import TickCosts

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class _Slot:
    """A row being decoded: its job, its options and what it has made so far."""

    job: Job
    options: RowOptions
    result: Decoded = dataclasses.field(default_factory=lambda: Decoded([], 0.0))


class ContinuousBatcher(Batcher):
    """The Batcher with `continuous_group` jobs decoded in slots, joining at every step."""

    def __init__(
        self,
        run_batch: RunBatch,
        lane: SlotLane,
        continuous_group: Hashable,
        max_wait_ms: float,
        max_queue: int,
        on_batch: Callable[[Hashable, int], None] | None = None,
        on_tokens: Callable[[int, float], None] | None = None,
        on_phase: Callable[[str, float], None] | None = None,
    ):
        """`on_tokens(tokens, seconds)` after every tick; `on_phase(phase, seconds)` for each
        part of a tick (t5forge_tick_seconds' phases: compact, admit, step, multi_step, host)."""
        super().__init__(run_batch, lane.settings.max_batch_size, max_wait_ms, max_queue, on_batch)
        self._lane = lane
        self._group = continuous_group
        self._on_tokens = on_tokens
        self._on_phase = on_phase or (lambda phase, seconds: None)
        self._device_done: float | None = None  # when the last tick's device work ended
        self._slots: list[_Slot | None] = [None] * lane.slots.slots
        self._costs = TickCosts(lane.settings.tokens_per_tick)

    async def stop(self) -> None:
        """Also cancels rows still in slots (none after a graceful drain)."""
        for slot in self._slots:
            if slot is not None:
                slot.job.future.cancel()
        await super().stop()

    def _batched(self, job: Job) -> bool:
        return job.group != self._group

    @property
    def running(self) -> int:
        """Rows in decode slots now."""
        return sum(slot is not None for slot in self._slots)

    async def _work(self) -> None:
        while True:
            oldest = self._oldest()  # also drops cancelled waiting jobs
            if oldest is not None and self._due_in(oldest) == 0:
                await self._run(oldest.group, self._next_batch(oldest.group))
                continue
            self._free_cancelled()
            admitted = self._admit()
            if admitted or self.running:
                await self._tick(admitted, self._compact())
                continue
            self._device_done = None  # idle time is not a host gap
            await self._until_arrival(None if oldest is None else self._due_in(oldest))

    def _free_cancelled(self) -> None:
        for index, slot in enumerate(self._slots):
            if slot is not None and slot.job.future.cancelled():
                self._slots[index] = None

    def _admit(self) -> list[tuple[int, _Slot]]:
        """Moves waiting rows (oldest first) into free slots: [(slot index, slot)]."""
        free = [index for index, slot in enumerate(self._slots) if slot is None]
        admitted, rest = [], []
        for job in self._jobs:
            if job.group == self._group and len(admitted) < len(free):
                slot = _Slot(job, job.payload[1])
                self._slots[free[len(admitted)]] = slot
                admitted.append((free[len(admitted)], slot))
            else:
                rest.append(job)
        self._jobs.clear()
        self._jobs.extend(rest)
        return admitted

    def _compact(self) -> list[tuple[int, int]]:
        """Moves rows above the live rows' step bucket into the holes below it (rows that
        ended left them; new rows filled the lowest first): [(from slot, to slot)], which the
        tick's device call makes on the pool before anything else."""
        moves = self._lane.compaction(np.array([slot is not None for slot in self._slots]))
        for source, target in moves:
            self._slots[target], self._slots[source] = self._slots[source], None
        return moves

    def _ticks(self, admitted: list, live: np.ndarray) -> int:
        """Tokens per slot this tick: one while anyone waits (an admission, a queued job: they
        get their turn after one token), otherwise the server's tokens_per_tick in one device
        call, unless every row ends sooner and their last tokens cost less one at a time
        (tick_costs)."""
        if admitted or self._jobs:
            return 1
        budgets = [
            slot.options.max_new_tokens - len(slot.result.tokens)
            for slot in self._slots
            if slot is not None
        ]
        lane = self._lane
        return self._costs.choose(
            max(budgets, default=0),
            lane.step_rows(live, 1),
            lane.step_rows(live, lane.settings.tokens_per_tick),
        )

    async def _tick(self, admitted: list[tuple[int, _Slot]], moves: list[tuple[int, int]]) -> None:
        live = np.array([slot is not None for slot in self._slots])
        if self._on_batch is not None:
            self._on_batch(self._group, int(live.sum()))
        lane, started = self._lane, time.perf_counter()
        ticks = self._ticks(admitted, live)
        rows = lane.step_rows(live, ticks)  # the slots its step covers, for its cost

        def on_device():
            begun = time.perf_counter()
            if self._device_done is not None:
                self._on_phase("host", begun - self._device_done)
            if moves:
                lane.compact(moves)
                self._on_phase("compact", time.perf_counter() - begun)
            if admitted:
                admitting = time.perf_counter()
                lane.admit(
                    [slot.job.payload[0] for _, slot in admitted],
                    [slot.options for _, slot in admitted],
                    [index for index, _ in admitted],
                )
                self._on_phase("admit", time.perf_counter() - admitting)
            stepping = time.perf_counter()
            if ticks == 1:
                tokens, log_likelihood = lane.step(live)
                tokens, log_likelihood = tokens[None], log_likelihood[None]
            else:
                tokens, log_likelihood = lane.steps(live)
            self._device_done = time.perf_counter()
            self._on_phase("step" if ticks == 1 else "multi_step", self._device_done - stepping)
            if not admitted and not moves:  # else it includes their work (dispatched async)
                self._costs.record(ticks, rows, self._device_done - stepping)
            return tokens, log_likelihood

        try:
            tokens, log_likelihood = await self.on_device(on_device)
        except Exception as error:  # noqa: BLE001 - a failed step fails the rows in it only
            logger.exception("decoding step of %d rows failed", int(live.sum()))
            lane.pool = None  # donated to the failed call: start from empty slots
            for index, slot in enumerate(self._slots):
                if slot is not None and not slot.job.future.done():
                    slot.job.future.set_exception(error)
                self._slots[index] = None
            return
        made = 0
        for index in np.flatnonzero(live):
            for tick in range(len(tokens)):
                made += self._take(index, int(tokens[tick, index]), log_likelihood[tick, index])
        if self._on_tokens is not None:
            self._on_tokens(made, time.perf_counter() - started)

    def _take(self, index: int, token: int, log_likelihood: float) -> bool:
        """Gives slot `index`'s row its next token, and frees the slot when the row ended
        (EOS, its budget, its client left). False when the slot had no row left to take it
        (it ended earlier in a multi-token tick)."""
        slot = self._slots[index]
        if slot is None or slot.job.future.cancelled():
            self._slots[index] = None
            return False
        slot.result.tokens.append(token)
        slot.result.log_likelihood += float(log_likelihood)
        if slot.job.on_token is not None:
            slot.job.on_token(token)
        if (
            token == self._lane.slots.eos_id
            or len(slot.result.tokens) >= slot.options.max_new_tokens
        ):
            slot.job.future.set_result(slot.result)
            self._slots[index] = None
        return True
