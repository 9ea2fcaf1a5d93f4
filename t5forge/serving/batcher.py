"""Dynamic batching: rows of concurrent requests are grouped into one device batch.

Each request becomes one job per input row. Jobs wait in arrival order; the worker takes the
oldest job's group (rows that can share one device program: stepwise generation with any mix
of greedy and sampling options, beam search with one beam count and length, scoring) and
gathers up to `max_batch_size` jobs of that group, waiting at most `max_wait_ms` after the
oldest arrived. The batch runs on one device thread, so the event loop keeps accepting
requests meanwhile and they form the next batch. A bounded queue turns overload into an
immediate `QueueFull` (503) instead of unbounded latency; cancelled jobs (clients that left)
are dropped before they reach the device, and streaming rows stop at the next step.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import logging
import time
from collections.abc import Callable, Hashable
from typing import Any

logger = logging.getLogger(__name__)


class QueueFull(Exception):
    """More rows are waiting than the server accepts; the client should retry later."""


def check_room(waiting: int, adding: int, limit: int) -> None:
    """Raises QueueFull unless `adding` more rows fit beside `waiting` under `limit`."""
    if waiting + adding > limit:
        raise QueueFull(f"{waiting} rows are waiting (limit {limit})")


@dataclasses.dataclass(eq=False)
class Job:
    """One row of work: what the engine needs, where its result goes, when it arrived."""

    group: Hashable
    payload: Any
    future: asyncio.Future
    on_token: Callable[[int], None] | None = None
    enqueued: float = dataclasses.field(default_factory=time.monotonic)


# (group, jobs) -> one result per job, run on the device thread.
RunBatch = Callable[[Hashable, list[Job]], list[Any]]


class Batcher:
    """Owns the queue, the worker task and the single device thread."""

    def __init__(
        self,
        run_batch: RunBatch,
        max_batch_size: int,
        max_wait_ms: float,
        max_queue: int,
        on_batch: Callable[[Hashable, int], None] | None = None,
    ):
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self._on_batch = on_batch
        self._jobs: collections.deque[Job] = collections.deque()
        self._arrived = asyncio.Event()
        self._device = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="device")
        self._worker: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def depth(self) -> int:
        """Rows waiting for the device (not counting the batch running now)."""
        return len(self._jobs)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._worker = asyncio.create_task(self._work(), name="batcher")

    async def stop(self) -> None:
        """Cancels what still waits (nothing does after a graceful drain) and the worker."""
        for job in self._jobs:
            job.future.cancel()
        self._jobs.clear()
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        self._device.shutdown(wait=True)

    async def on_device(self, fn: Callable[[], Any]) -> Any:
        """Runs fn on the device thread (warm-up uses it, so it never races a batch)."""
        return await asyncio.get_running_loop().run_in_executor(self._device, fn)

    def submit(
        self,
        group: Hashable,
        payloads: list[Any],
        on_tokens: list[Callable[[int], None]] | None = None,
    ) -> list[asyncio.Future]:
        """Queues one job per payload (all or none), returning their futures."""
        check_room(len(self._jobs), len(payloads), self.max_queue)
        loop = asyncio.get_running_loop()
        jobs = [
            Job(group, payload, loop.create_future(), on_tokens[i] if on_tokens else None)
            for i, payload in enumerate(payloads)
        ]
        self._jobs.extend(jobs)
        self._arrived.set()
        return [job.future for job in jobs]

    def _batched(self, job: Job) -> bool:
        """Whether `job` runs in a whole batch of its group (here every job does)."""
        return True

    def _oldest(self) -> Job | None:
        """The oldest waiting job that runs in a whole batch (cancelled ones are dropped)."""
        self._jobs = collections.deque(job for job in self._jobs if not job.future.cancelled())
        return next((job for job in self._jobs if self._batched(job)), None)

    def _next_batch(self, group: Hashable) -> list[Job]:
        """Takes up to max_batch_size waiting jobs of `group`, oldest first."""
        batch, rest = [], collections.deque()
        for job in self._jobs:
            if job.group == group and len(batch) < self.max_batch_size:
                batch.append(job)
            else:
                rest.append(job)
        self._jobs = rest
        return batch

    def _due_in(self, oldest: Job) -> float:
        """Seconds to wait before taking oldest's batch (0 when it is full or due)."""
        same_group = sum(1 for job in self._jobs if job.group == oldest.group)
        if same_group >= self.max_batch_size:
            return 0.0
        return max(0.0, oldest.enqueued + self.max_wait_s - time.monotonic())

    async def _until_arrival(self, timeout: float | None = None) -> None:
        """Returns when a job arrives (or after `timeout` seconds)."""
        self._arrived.clear()
        try:
            await asyncio.wait_for(self._arrived.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    async def _work(self) -> None:
        while True:
            oldest = self._oldest()
            if oldest is None:
                await self._until_arrival()
                continue
            wait = self._due_in(oldest)
            if wait > 0:
                await self._until_arrival(wait)
                continue
            await self._run(oldest.group, self._next_batch(oldest.group))

    async def _run(self, group: Hashable, jobs: list[Job]) -> None:
        """Runs one batch on the device thread and settles its jobs' futures."""
        if self._on_batch is not None:
            self._on_batch(group, len(jobs))
        try:
            results = await self.on_device(lambda: self._run_batch(group, jobs))
        except Exception as error:  # noqa: BLE001 - a failed batch fails its requests only
            logger.exception("batch of %d %s rows failed", len(jobs), group)
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(error)
            return
        for job, result in zip(jobs, results):
            if not job.future.done():
                job.future.set_result(result)

    def call_soon(self, fn: Callable, *args) -> None:
        """Schedules fn(*args) on the event loop from the device thread (streamed tokens)."""
        self._loop.call_soon_threadsafe(fn, *args)
