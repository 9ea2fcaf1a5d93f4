"""The device side of the server: pads rows to a few compiled shapes and runs them.

Every device batch is padded to a batch bucket (a power of two up to max_batch_size) and a
length bucket (16, 64, 256, ... up to the model's maximum input length; t5forge.data.buckets),
built by the model's feature converter, so the set of XLA programs is small and known in advance; `warmup` compiles all of them before the server
reports ready, so no request pays a compile. Only this module touches the device, and only
from the batcher's single device thread.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable

import jax
import numpy as np

from t5forge.api import Model
from t5forge.data.buckets import Buckets
from t5forge.models.layers import stack_projections
from t5forge.serving.executables import ExecutableStore, on_device, server_identity
from t5forge.serving.settings import ServerSettings
from t5forge.serving.slots import SlotDecoder
from t5forge.serving.stepwise import Decoded, RowOptions, StepDecoder

logger = logging.getLogger(__name__)

_BEAM_ALPHA = 0.6  # T5X's length penalty


def length_buckets(limit: int) -> Buckets:
    """16, 64, 256, ... below `limit`, then `limit`: padding costs at most 4x, shapes stay few."""
    return Buckets(smallest=16, growth=4, limit=limit)


@dataclasses.dataclass(frozen=True)
class ScorePair:
    """One (input, target) pair to score, already tokenized."""

    input_tokens: list[int]
    target_tokens: list[int]


@dataclasses.dataclass(frozen=True)
class WarmupShape:
    """One program compiled at start-up: its name in /healthz, its size (rows x positions,
    the order of compilation), a call that compiles it without running it, and whether the
    server waits for it before reporting ready (generation's programs) or compiles it while
    serving (scoring's and beam search's)."""

    name: str
    size: int
    run: Callable[[], object]
    before_ready: bool = True


class Engine:
    """Runs generation (stepwise greedy/sampling, or beam search) and scoring on the device."""

    def __init__(self, model: Model, settings: ServerSettings):
        self.model = model
        self.settings = settings
        # Kernels of fused projections stacked once here: a one-step program would stack
        # them at every call (7 MB per step for the demo model; docs/serving-profile.md).
        self.params = stack_projections(model.params)
        # Every program runs through the store: on a restart they come back from disk.
        self.programs = ExecutableStore(
            settings.compile_cache, server_identity(model, settings, self.params)
        )
        self.decoder = StepDecoder(model.t5x_model, self.programs, settings.tokens_per_tick)
        self.batch_buckets = Buckets()
        # Continuous one-token steps run at least two slots: XLA on CPU writes a one-slot
        # step's caches back by copying the whole pool (a one-slot step took 4-6 ms for the
        # demo model and 34 ms for T5 1.1 small, two slots 2.4 and 19.5 ms; /tmp profile,
        # issue 28's note). A multi-token step is a loop, which XLA does not fold that way,
        # so a lone row's multi-token ticks step one slot (per token: T5 1.1 small 4.43 ms
        # against 5.41 on two slots, the demo model 0.42 against 0.45; docs/serving-profile.md).
        self.step_buckets = Buckets(smallest=min(2, settings.max_batch_size))
        self.input_buckets = length_buckets(model.max_input_length)
        # Beam outputs are rescored as targets: those of the warmed beam program, or of any
        # length when the operator allows new beam shapes (compiled on request anyway).
        beam_outputs = (
            settings.max_new_tokens_limit
            if settings.allow_new_beam_shapes
            else settings.max_new_tokens * bool(settings.warmup_num_beams)
        )
        self.target_buckets = length_buckets(max(settings.max_target_length, beam_outputs))
        # Continuous batching (encoder-decoders): one slot per row of a full batch, each with
        # room for the longest output and the longest input.
        self.slots = None
        self.pool = None
        self.slot_widths = np.zeros(settings.max_batch_size, int)  # each slot's input bucket
        if settings.scheduler == "continuous" and not model.config.is_decoder_only:
            self.slots = SlotDecoder(
                model.t5x_model,
                settings.max_batch_size,
                settings.max_new_tokens_limit,
                self.input_buckets.sizes()[-1],
                self.programs,
            )

    # ------------------------------------------------------------------ generation

    def _predict_features(self, rows: list[list[int]]):
        width = self.input_buckets.fit(max(map(len, rows)))
        features, prompt_width = self.model.predict_features(
            rows, width, self.batch_buckets.fit(len(rows))
        )
        return _on_device(features), prompt_width

    def _compile_generate(self, batch: int, width: int) -> None:
        """Static generation's programs for `batch` rows of `width` input tokens."""
        features, prompt_width = self._predict_features([[1] * width] * batch)
        cache_length = prompt_width + self.settings.max_new_tokens_limit
        self.decoder.compile(self.params, features, cache_length)

    def generate(
        self,
        rows: list[list[int]],
        options: list[RowOptions],
        emit: Callable[[int, int], None] | None = None,
        cancelled: Callable[[int], bool] | None = None,
    ) -> list[Decoded]:
        """Greedy or sampled continuations, each row with its own options (see stepwise)."""
        features, prompt_width = self._predict_features(rows)
        return self.decoder.decode(
            self.params,
            features,
            prompt_width + self.settings.max_new_tokens_limit,
            options,
            emit,
            cancelled,
        )

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
        by_width: dict[int, list[int]] = {}
        for i, row in enumerate(rows):
            by_width.setdefault(self.input_buckets.fit(len(row)), []).append(i)
        for width, members in by_width.items():
            features, _ = self.model.predict_features(
                [rows[i] for i in members], width, self.batch_buckets.fit(len(members))
            )
            self.pool = self.slots.admit(
                self.params,
                self._slot_pool(),
                features,
                [slot_ids[i] for i in members],
                [options[i] for i in members],
                compile_only,
            )
            if not compile_only:
                self.slot_widths[[slot_ids[i] for i in members]] = width

    def _slot_pool(self) -> dict:
        """The decode slots' device state (made empty on first use, or after a failed call
        consumed it)."""
        if self.pool is None:
            self.pool = self.slots.empty_pool(self.params)
        return self.pool

    def compaction(self, live: np.ndarray) -> list[tuple[int, int]]:
        """(source, target) slot moves that put every occupied slot (`live` bool[slots])
        inside the step bucket of their count, so that a step covers the live rows and not
        the holes rows that ended left below the last one; [] when they fit already."""
        occupied = np.flatnonzero(live)
        if not len(occupied):
            return []
        rows = self.batch_buckets.fit(len(occupied))
        holes = np.flatnonzero(~live[:rows])
        return [(int(s), int(t)) for s, t in zip(occupied[occupied >= rows], holes)]

    def max_moves(self) -> int:
        """The most moves one compaction can make with this pool (0: never compacts)."""
        slots = self.settings.max_batch_size
        return max(min(n, slots - self.batch_buckets.fit(n)) for n in range(1, slots + 1))

    def compact(self, moves: list[tuple[int, int]], compile_only: bool = False) -> None:
        """Moves slots' rows as `compaction` planned (one device call, its number of moves
        padded to a batch bucket). `compile_only` compiles the program instead (warm-up)."""
        count = self.batch_buckets.fit(len(moves))
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
        buckets = self.step_buckets if ticks == 1 else self.batch_buckets
        return buckets.fit(int(occupied[-1]) + 1 if len(occupied) else 1)

    def _steps(self, live: np.ndarray, ticks: int):
        occupied = np.flatnonzero(live)
        rows = self.step_rows(live, ticks)
        width = max(self.slot_widths[occupied], default=self.input_buckets.sizes()[0])
        self.pool, tokens, log_likelihood = self.slots.step(
            self.params, self._slot_pool(), live[:rows], int(width), ticks=ticks
        )
        return jax.device_get((tokens, log_likelihood))

    def _compile_step(self, rows: int, width: int, ticks: int) -> None:
        """The continuous step of the first `rows` slots at encoder width `width`, making
        `ticks` tokens per call."""
        live = np.ones((rows,), bool)
        self.slots.step(self.params, self._slot_pool(), live, width, compile_only=True, ticks=ticks)

    def beam(
        self,
        rows: list[list[int]],
        num_beams: int,
        max_new_tokens: int,
        compile_only: bool = False,
    ) -> list[Decoded] | None:
        """Beam search (T5X's) as `Model.generate(method='beam')`; log-likelihoods rescored.
        `compile_only` compiles the search's program instead (warm-up; the rescoring's are
        scoring's own shapes)."""
        features, prompt_width = self._predict_features(rows)
        decoded = self.model.t5x_model.predict_batch_with_aux(
            self.params,
            features,
            jax.random.PRNGKey(0),
            method="beam",
            num_decodes=num_beams,
            alpha=_BEAM_ALPHA,
            max_decode_length=prompt_width + max_new_tokens,
            # All beams, the best picked here in numpy: indexing on the device would compile
            # small programs per shape that the warm-up does not.
            return_all_decodes=True,
            run=self.programs.prepare if compile_only else self.programs.run,
        )
        if compile_only:
            return None
        best = np.asarray(decoded[0])[: len(rows), -1, :max_new_tokens]
        outputs = [_until_eos(row, self.model.t5x_model.eos_id) for row in best.tolist()]
        scores = self.score([ScorePair(r, o) for r, o in zip(rows, outputs)])
        return [Decoded(o, s) for o, s in zip(outputs, scores)]

    # ------------------------------------------------------------------ scoring

    def score(self, pairs: list[ScorePair], compile_only: bool = False) -> list[float] | None:
        """Log-likelihood of each target given its input (sum over target tokens).
        `compile_only` compiles the program instead (warm-up)."""
        inputs = [p.input_tokens for p in pairs]
        targets = [p.target_tokens for p in pairs]
        lengths = {
            "inputs": self.input_buckets.fit(max(map(len, inputs))),
            "targets": self.target_buckets.fit(max(map(len, targets))),
        }
        batch = self.batch_buckets.fit(len(pairs))
        features = _on_device(self.model.score_features(inputs, targets, lengths, batch))
        if compile_only:
            return self.model.t5x_model.score_batch(
                self.params, features, run=self.programs.prepare
            )
        scores = self.model.t5x_model.score_batch(self.params, features, run=self.programs.run)
        return [float(s) for s in np.asarray(scores)[: len(pairs)]]

    # ------------------------------------------------------------------ warm-up

    def warmup_shapes(self) -> list[WarmupShape]:
        """Every program traffic can need, smallest first within each phase (the buckets most
        requests fit, and the quickest to compile). Before ready: generation's, that is
        continuous batching's step of each (slots, input length) bucket and its admission of
        each (batch, input length) bucket, or static generation's batches under the static
        scheduler, and the slots' compaction for each (bucketed) number of moves. While
        serving: beam search with `warmup_num_beams` at the default max_new_tokens, and
        scoring."""
        settings, shapes = self.settings, []
        for batch in self.batch_buckets.sizes(settings.max_batch_size):
            for length in self.input_buckets.sizes():
                size = batch * length
                if self.slots is not None:
                    for ticks in sorted({1, settings.tokens_per_tick}):
                        if ticks > 1 or batch >= self.step_buckets.smallest:
                            run = functools.partial(self._compile_step, batch, length, ticks)
                            name = f"step {batch}x{length}" + (f" x{ticks}" if ticks > 1 else "")
                            shapes.append(WarmupShape(name, size * ticks, run))
                    rows, options = [[1] * length] * batch, [RowOptions(1)] * batch
                    run = functools.partial(self.admit, rows, options, list(range(batch)), True)
                    shapes.append(WarmupShape(f"admit {batch}x{length}", size, run))
                else:
                    run = functools.partial(self._compile_generate, batch, length)
                    shapes.append(WarmupShape(f"generate {batch}x{length}", size, run))
                if settings.warmup_num_beams:
                    beams, new_tokens = settings.warmup_num_beams, settings.max_new_tokens
                    rows = [[1] * length] * batch
                    run = functools.partial(self.beam, rows, beams, new_tokens, True)
                    name = f"beam {batch}x{length} num_beams={beams} max_new_tokens={new_tokens}"
                    shapes.append(WarmupShape(name, size * beams, run, before_ready=False))
                for target_length in self.target_buckets.sizes():
                    pairs = [ScorePair([1] * length, [1] * target_length)] * batch
                    run = functools.partial(self.score, pairs, True)
                    name = f"score {batch}x{length} targets {target_length}"
                    score_size = batch * max(length, target_length)
                    shapes.append(WarmupShape(name, score_size, run, before_ready=False))
        shapes = sorted(shapes, key=lambda shape: (not shape.before_ready, shape.size))
        # Compactions last of generation's: only rows that ended call for them.
        generation = sum(shape.before_ready for shape in shapes)
        moves = []
        if self.slots is not None and self.max_moves():
            for count in self.batch_buckets.sizes(self.max_moves()):
                run = functools.partial(self.compact, [(self.slots.slots - 1, 0)] * count, True)
                moves.append(WarmupShape(f"move {count}", count, run))
        return shapes[:generation] + moves + shapes[generation:]


def _on_device(features: dict) -> dict:
    """A batch's host arrays on the device (see `on_device`); other entries as they are."""
    return {
        name: on_device(value) if isinstance(value, np.ndarray) else value
        for name, value in features.items()
    }


def _until_eos(tokens: list[int], eos_id: int) -> list[int]:
    """The tokens up to and including the first EOS (the decoders pad with 0 after it)."""
    return tokens[: tokens.index(eos_id) + 1] if eos_id in tokens else [t for t in tokens if t]
