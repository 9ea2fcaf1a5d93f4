"""The device side of the server: pads rows to a few compiled shapes and runs them.

Every device batch is padded to a batch bucket (a power of two up to max_batch_size) and a
length bucket (16, 64, 256, ... up to the model's maximum input length; t5forge.data.buckets),
built by the model's feature converter, so the set of XLA programs is small and known in advance; `warmup` compiles all of them before the server
reports ready, so no request pays a compile. Only this module and its decode lanes
(lanes.py) touch the device, each lane from its own batcher's device thread.
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
from t5forge.serving.lanes import SlotLane
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
        self.input_buckets = length_buckets(model.max_input_length)
        # Beam outputs are rescored as targets: those of the warmed beam program, or of any
        # length when the operator allows new beam shapes (compiled on request anyway).
        beam_outputs = (
            settings.max_new_tokens_limit
            if settings.allow_new_beam_shapes
            else settings.max_new_tokens * bool(settings.warmup_num_beams)
        )
        self.target_buckets = length_buckets(max(settings.max_target_length, beam_outputs))
        # Continuous batching (encoder-decoders): the batch's rows split into lanes of slots
        # (lanes.py), each slot with room for the longest output and the longest input.
        self.lanes: list[SlotLane] = []
        if settings.scheduler == "continuous" and not model.config.is_decoder_only:
            count = settings.decode_lanes
            slots = SlotDecoder(
                model.t5x_model,
                settings.max_batch_size // count,
                settings.max_new_tokens_limit,
                self.input_buckets.sizes()[-1],
                self.programs,
            )
            self.lanes = [SlotLane(self, slots) for _ in range(count)]
        elif settings.decode_lanes > 1:
            logger.info(
                "decode_lanes %d has no effect: lanes split continuous batching's slots, and "
                "this server generates in static batches",
                settings.decode_lanes,
            )
        # Continuous one-token steps run at least two slots: XLA on CPU writes a one-slot
        # step's caches back by copying the whole pool (a one-slot step took 4-6 ms for the
        # demo model and 34 ms for T5 1.1 small, two slots 2.4 and 19.5 ms; /tmp profile,
        # issue 28's note). A multi-token step is a loop, which XLA does not fold that way,
        # so a lone row's multi-token ticks step one slot (per token: T5 1.1 small 4.43 ms
        # against 5.41 on two slots, the demo model 0.42 against 0.45; docs/serving-profile.md).
        pool = self.lanes[0].slots.slots if self.lanes else settings.max_batch_size
        self.step_buckets = Buckets(smallest=min(2, pool))

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
        lane = self.lanes[0] if self.lanes else None  # every lane runs the same programs
        for batch in self.batch_buckets.sizes(settings.max_batch_size):
            for length in self.input_buckets.sizes():
                size = batch * length
                if lane is not None and batch <= lane.slots.slots:
                    for ticks in sorted({1, settings.tokens_per_tick}):
                        if ticks > 1 or batch >= self.step_buckets.smallest:
                            run = functools.partial(lane.compile_step, batch, length, ticks)
                            name = f"step {batch}x{length}" + (f" x{ticks}" if ticks > 1 else "")
                            shapes.append(WarmupShape(name, size * ticks, run))
                    rows, options = [[1] * length] * batch, [RowOptions(1)] * batch
                    run = functools.partial(lane.admit, rows, options, list(range(batch)), True)
                    shapes.append(WarmupShape(f"admit {batch}x{length}", size, run))
                elif lane is None:
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
        if lane is not None and lane.max_moves():
            for count in self.batch_buckets.sizes(lane.max_moves()):
                run = functools.partial(lane.compact, [(lane.slots.slots - 1, 0)] * count, True)
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
