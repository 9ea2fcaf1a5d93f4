"""Requests in, answers out: tokenizes, queues one job per row, and shapes the results.

It sits between the HTTP app (which only speaks JSON) and the batcher/engine (which only see
token rows): it applies the input length policy, chooses each row's device group, turns the
engine's tokens back into text, and keeps the metrics. Warm-up compiles generation's programs
on the device thread before anything else (until then the service is not ready), then the
rest while it serves; after a restart every program loads from the store before it is ready.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import secrets
import time
from collections.abc import AsyncIterator, Hashable

from t5forge import compile_cache
from t5forge.api import EncodedRows, Model
from t5forge.errors import T5ForgeError
from t5forge.serving.batcher import Batcher, Job, check_room
from t5forge.serving.continuous import ContinuousBatcher
from t5forge.serving.engine import Engine, ScorePair
from t5forge.serving.metrics import ServerMetrics
from t5forge.serving.schemas import (
    ClassifyRequest,
    PredictRequest,
    RequestError,
    ScoreRequest,
)
from t5forge.serving.settings import ServerSettings
from t5forge.serving.stepwise import Decoded, RowOptions
from t5forge.serving.streaming import TextDeltas, sse_event
from t5forge.serving.truncation import TruncationNotices

logger = logging.getLogger(__name__)

_GENERATE, _SCORE = ("generate",), ("score",)


class InferenceService:
    """One model served: its engine, batcher, metrics and readiness."""

    def __init__(self, model: Model, settings: ServerSettings):
        if model.vocabulary is None:
            raise T5ForgeError(
                "the model has no vocabulary (no spiece.model beside the "
                "checkpoint); pass --vocab PATH to serve text"
            )
        # A shallow copy: the server's length policy must not change the caller's model
        # (params and compiled functions are shared, not copied).
        model = copy.copy(model)
        if settings.max_input_length is not None:
            model.max_input_length = settings.max_input_length
        model.input_length_policy = settings.input_length_policy
        self.model = model
        self.settings = settings
        # The server keeps its programs in its own store under settings.compile_cache
        # (serving/executables.py), loaded without tracing; JAX's cache is off in this process,
        # since what it hands back cannot be stored again.
        compile_cache.use("")
        self.engine = Engine(model, settings)
        self.metrics = ServerMetrics()
        self.truncation = TruncationNotices(self.metrics.truncated_inputs)
        if self.engine.lanes:
            # One batcher per decode lane, each with its own device thread (lanes.py); the
            # first also runs the warm-up and the static batches (beam search, scoring).
            self.batchers: list[Batcher] = [
                ContinuousBatcher(
                    self._run_batch,
                    lane,
                    _GENERATE,
                    settings.max_wait_ms,
                    settings.max_queue,
                    on_batch=self._count_batch,
                    on_tokens=self._count_tokens,
                    on_phase=lambda phase, seconds: self.metrics.tick_seconds.labels(
                        phase=phase
                    ).observe(seconds),
                )
                for lane in self.engine.lanes
            ]
        else:
            if settings.scheduler == "continuous":
                logger.info(
                    "decoder-only model: generation runs in static batches (continuous "
                    "batching serves encoder-decoders)"
                )
            self.batchers = [
                Batcher(
                    self._run_batch,
                    settings.max_batch_size,
                    settings.max_wait_ms,
                    settings.max_queue,
                    on_batch=self._count_batch,
                )
            ]
        self.batcher = self.batchers[0]
        self.ready = False
        # Warm-up shape name -> 'waiting', 'compiling' or 'ready' (reported by /healthz).
        self.shapes: dict[str, str] = {}

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        for batcher in self.batchers:
            await batcher.start()
        self._warmup = asyncio.create_task(self._warm_up(), name="warm-up")

    async def stop(self) -> None:
        self._warmup.cancel()
        await asyncio.gather(self._warmup, return_exceptions=True)
        for batcher in self.batchers:
            await batcher.stop()

    async def _warm_up(self) -> None:
        """Readies every program (none is run). After a restart their stored executables
        load in seconds, so the service reports ready only once every shape is in. Else
        generation's compile on the device thread before the service reports ready, then
        scoring's and beam search's on a worker thread while it serves (a request that needs
        one of those first waits for its compilation); then all are stored for the next start."""
        stored = await asyncio.to_thread(self.engine.programs.load)
        shapes = self.engine.warmup_shapes()
        if stored:
            shapes = [dataclasses.replace(shape, before_ready=True) for shape in shapes]
        self.shapes = {shape.name: "waiting" for shape in shapes}
        started = time.perf_counter()
        for shape in shapes:
            if not shape.before_ready and not self.ready:
                self._report_ready(started)
            self.shapes[shape.name] = "compiling"
            try:
                if shape.before_ready:
                    await self.batcher.on_device(shape.run)
                else:
                    await asyncio.to_thread(shape.run)
            except Exception:
                self.shapes[shape.name] = "failed"
                if shape.before_ready:
                    logger.exception("warm-up of %s failed; the server stays unready", shape.name)
                    raise
                logger.exception("warm-up of %s failed; it compiles on first use", shape.name)
                continue
            self.shapes[shape.name] = "ready"
        if not self.ready:
            self._report_ready(started)
        programs = self.engine.programs
        logger.info(
            "all %d shapes ready in %.1f s (%d programs loaded from stored executables, %d "
            "compiled)",
            len(shapes),
            time.perf_counter() - started,
            programs.loaded,
            programs.compiled,
        )
        await asyncio.to_thread(programs.save)

    def _report_ready(self, started: float) -> None:
        self.ready = True
        self.metrics.ready.set(1)
        compiled = sum(state == "ready" for state in self.shapes.values())
        logger.info(
            "ready: %d shapes compiled in %.1f s (%d more compile while serving)",
            compiled,
            time.perf_counter() - started,
            len(self.shapes) - compiled,
        )

    # ------------------------------------------------------------------ device side

    @property
    def depth(self) -> int:
        """Rows waiting for a device thread, over every lane."""
        return sum(batcher.depth for batcher in self.batchers)

    @property
    def running(self) -> int:
        """Rows in decode slots now, over every lane (0 under the static scheduler)."""
        return sum(getattr(batcher, "running", 0) for batcher in self.batchers)

    def _count_batch(self, group: Hashable, rows: int) -> None:
        self.metrics.batch_size.labels(kind=group[0]).observe(rows)
        self.metrics.queue_depth.set(self.depth)

    def _count_tokens(self, tokens: int, seconds: float) -> None:
        self.metrics.generated_tokens.inc(tokens)
        self.metrics.tokens_per_second.set(tokens / max(seconds, 1e-9))
        self.metrics.queue_depth.set(self.depth)

    def _run_batch(self, group: Hashable, jobs: list[Job]) -> list:
        """Runs on the device thread: one engine call for the whole batch."""
        started = time.perf_counter()
        if group == _SCORE:
            return self.engine.score([job.payload for job in jobs])
        rows = [job.payload[0] for job in jobs]
        if group == _GENERATE:

            def emit(row: int, token: int) -> None:
                if jobs[row].on_token is not None:
                    self.batcher.call_soon(jobs[row].on_token, token)

            results = self.engine.generate(
                rows,
                [job.payload[1] for job in jobs],
                emit,
                lambda row: jobs[row].future.cancelled(),
            )
        else:
            _, num_beams, max_new_tokens = group
            results = self.engine.beam(rows, num_beams, max_new_tokens)
        tokens = sum(len(r.tokens) for r in results)
        self.metrics.generated_tokens.inc(tokens)
        self.metrics.tokens_per_second.set(tokens / max(time.perf_counter() - started, 1e-9))
        return results

    # ------------------------------------------------------------------ requests

    def _encode(
        self, texts: list[str], name: str, add_eos: bool = True, length_policy: bool = True
    ) -> EncodedRows:
        try:
            encoded = self.model.encode(
                texts, name, add_eos, apply_length_policy=length_policy, warn_truncated=False
            )
        except T5ForgeError as error:
            raise RequestError(422, str(error)) from error
        self.truncation.record(sum(encoded.truncated), self.model.max_input_length)
        return encoded

    def _submit(self, group: Hashable, payloads: list, on_tokens=None) -> list[asyncio.Future]:
        if not self.ready:
            self.metrics.rejected.labels(reason="warming_up").inc()
            raise RequestError(
                503,
                "the server is still compiling its models (warm-up); retry "
                "shortly, /healthz says when it is ready",
            )
        check_room(self.depth, len(payloads), self.settings.max_queue)
        if group != _GENERATE or len(self.batchers) == 1:
            futures = self.batcher.submit(group, payloads, on_tokens)
        else:
            futures = self._submit_to_lanes(payloads, on_tokens)
        self.metrics.queue_depth.set(self.depth)
        return futures

    def _submit_to_lanes(self, payloads: list, on_tokens=None) -> list[asyncio.Future]:
        """Generation rows spread over the decode lanes, each row to the lane with the fewest
        rows running or waiting (counting the rows placed before it): the futures in order."""
        load = [batcher.running + batcher.depth for batcher in self.batchers]
        by_lane: dict[int, list[int]] = {}
        for row in range(len(payloads)):
            lane = load.index(min(load))
            load[lane] += 1
            by_lane.setdefault(lane, []).append(row)
        futures: list[asyncio.Future | None] = [None] * len(payloads)
        for lane, rows in by_lane.items():
            placed = self.batchers[lane].submit(
                _GENERATE,
                [payloads[row] for row in rows],
                [on_tokens[row] for row in rows] if on_tokens else None,
            )
            for row, future in zip(rows, placed):
                futures[row] = future
        return futures

    def _predict_jobs(self, request: PredictRequest, on_tokens=None):
        encoded = self._encode(request.inputs, "inputs", not self.model.config.is_decoder_only)
        max_new_tokens = request.max_new_tokens or self.settings.max_new_tokens
        seed = None
        if request.method == "beam":
            group = ("beam", request.num_beams or 4, max_new_tokens)
            self._check_beam_compiled(group)
            payloads = [(row, None) for row in encoded.rows]
        else:
            sampling = request.method == "sample"
            options = RowOptions(
                max_new_tokens=max_new_tokens,
                temperature=(1.0 if request.temperature is None else request.temperature)
                if sampling
                else 0.0,
                top_k=request.top_k or 0,
                top_p=request.top_p or 0.0,
                # Unseeded sampling draws a seed, returned with the outputs so that the
                # request can be repeated exactly.
                seed=secrets.randbelow(2**32)
                if request.seed is None and sampling
                else request.seed or 0,
                scored=request.return_scores,
            )
            seed = options.seed if sampling else None
            group, payloads = _GENERATE, [(row, options) for row in encoded.rows]
        return encoded, seed, self._submit(group, payloads, on_tokens)

    def _check_beam_compiled(self, group: tuple) -> None:
        """Bounded compilation: a beam program per (num_beams, max_new_tokens) costs seconds
        of stalled traffic and its memory, so only the warmed one runs unless the operator
        allows others (--allow_new_beam_shapes)."""
        _, num_beams, max_new_tokens = group
        settings = self.settings
        warmed = (settings.warmup_num_beams, settings.max_new_tokens)
        if settings.allow_new_beam_shapes or (num_beams, max_new_tokens) == warmed:
            return
        if not settings.warmup_num_beams:
            raise RequestError(
                422,
                "beam search is off on this server (--warmup_num_beams 0 and no "
                "--allow_new_beam_shapes); use method 'greedy' or 'sample'",
            )
        raise RequestError(
            422,
            f"beam search runs with num_beams={warmed[0]} and max_new_tokens={warmed[1]} "
            f"only on this server (the compiled program; the operator may allow others with "
            f"--allow_new_beam_shapes); got num_beams={num_beams}, "
            f"max_new_tokens={max_new_tokens}",
        )

    async def predict(self, request: PredictRequest) -> dict:
        encoded, seed, futures = self._predict_jobs(request)
        results: list[Decoded] = await _gather(futures)
        answer = {
            "outputs": [self.model.vocabulary.decode(r.tokens) for r in results],
            "truncated": encoded.truncated,
        }
        if seed is not None:
            answer["seed"] = seed
        if request.return_scores:
            answer["scores"] = [r.log_likelihood for r in results]
        return answer

    def stream(self, request: PredictRequest) -> AsyncIterator[bytes]:
        """Queues the rows now (so refusals are ordinary errors, not a broken stream) and
        returns the server-sent events: {"index", "token", "text"} per token, then each row's
        full output, then [DONE]. Leaving early (client gone) cancels the rows."""
        tokens: asyncio.Queue = asyncio.Queue()
        callbacks = [
            lambda token, i=i: tokens.put_nowait((i, token)) for i in range(len(request.inputs))
        ]
        encoded, seed, futures = self._predict_jobs(request, callbacks)
        return self._events(request, encoded, seed, futures, tokens)

    async def _events(self, request, encoded: EncodedRows, seed, futures, tokens: asyncio.Queue):
        deltas = [TextDeltas(self.model.vocabulary) for _ in futures]
        finished = asyncio.ensure_future(_gather(futures))
        try:
            while not (finished.done() and tokens.empty()):
                getter = asyncio.ensure_future(tokens.get())
                await asyncio.wait({getter, finished}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    continue
                index, token = getter.result()
                yield sse_event({"index": index, "token": token, "text": deltas[index].add(token)})
            for index, result in enumerate(finished.result()):
                event = {
                    "index": index,
                    "output": self.model.vocabulary.decode(result.tokens),
                    "truncated": encoded.truncated[index],
                    "done": True,
                }
                if request.return_scores:
                    event["score"] = result.log_likelihood
                if seed is not None:
                    event["seed"] = seed
                yield sse_event(event)
            yield sse_event("[DONE]")
        finally:
            if not finished.done():  # the client left mid-stream: stop its rows
                self.metrics.disconnects.inc()
                finished.cancel()

    async def score(self, request: ScoreRequest) -> dict:
        inputs = self._encode(request.inputs, "inputs", not self.model.config.is_decoder_only)
        targets = self._encode(request.targets, "targets", length_policy=False)
        self._check_targets(targets.rows, "targets")
        futures = self._submit(_SCORE, [ScorePair(i, t) for i, t in zip(inputs.rows, targets.rows)])
        return {"scores": await _gather(futures), "truncated": inputs.truncated}

    async def classify(self, request: ClassifyRequest) -> dict:
        inputs = self._encode(request.inputs, "inputs", not self.model.config.is_decoder_only)
        per_input = request.choices_per_input()
        pairs = []
        for row, choices in zip(inputs.rows, per_input):
            choice_rows = self._encode(choices, "choices", length_policy=False).rows
            self._check_targets(choice_rows, "choices")
            pairs += [ScorePair(row, choice) for choice in choice_rows]
        scores = iter(await _gather(self._submit(_SCORE, pairs)))
        results = []
        for choices in per_input:
            ranked = sorted(
                ({"choice": c, "score": next(scores)} for c in choices), key=lambda r: -r["score"]
            )
            results.append({"prediction": ranked[0]["choice"], "ranked": ranked})
        return {"results": results, "truncated": inputs.truncated}

    def _check_targets(self, rows: list[list[int]], name: str) -> None:
        limit = self.settings.max_target_length
        for i, row in enumerate(rows):
            if len(row) > limit:
                raise RequestError(
                    422,
                    f"{name}[{i}] has {len(row)} tokens; the server scores "
                    f"at most {limit} (--max_target_length)",
                )


async def _gather(futures: list[asyncio.Future]) -> list:
    """The futures' results; cancelling the caller cancels every still-waiting row."""
    return list(await asyncio.gather(*futures))
