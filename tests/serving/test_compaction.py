"""Slot compaction: when rows that ended leave holes below a running row, the rows above the
live rows' step bucket move down, so a step covers the live rows; moved rows and rows admitted
after the move decode exactly as `Model.generate` and a static batch, and once warm a
compaction compiles nothing."""

import asyncio
import dataclasses

import numpy as np
import pytest
from server_helpers import TEST_SETTINGS, compiled_programs

from t5forge.serving.continuous import ContinuousBatcher
from t5forge.serving.engine import Engine
from t5forge.serving.stepwise import RowOptions, StepDecoder

GROUP = ("generate",)
FIRST = [[5, 9, 3, 12, 7, 1], [14, 3, 1], [8, 4, 1], [7, 7, 8, 9, 10, 11, 12, 13, 14, 15, 1]]
FIRST_OPTIONS = [
    RowOptions(2),
    RowOptions(2, temperature=1.0, seed=5),
    RowOptions(2),
    RowOptions(10, temperature=0.8, top_k=6, seed=3),  # outlives the others: it moves
]
LATER = [[9, 9, 4, 1], [21, 6, 30, 2, 1]]
LATER_OPTIONS = [RowOptions(6), RowOptions(8, temperature=0.9, top_p=0.9, seed=7)]


def test_a_compaction_plan_moves_rows_above_the_live_bucket_into_the_lowest_holes(tiny_model):
    engine = Engine(tiny_model, dataclasses.replace(TEST_SETTINGS, max_batch_size=32))
    lane = engine.lanes[0]
    live = np.zeros(32, bool)
    live[[1, 17, 31]] = True  # 3 rows: a step of 4 slots holds them after moves into 0 and 2
    assert lane.compaction(live) == [(17, 0), (31, 2)]
    live[:] = False
    live[[0, 3]] = True  # 2 rows fit a 2-slot step: the one in slot 3 moves into slot 1
    assert lane.compaction(live) == [(3, 1)]
    live[[1, 2]] = True  # full up to the last one: nothing to move
    assert lane.compaction(live) == []
    assert lane.compaction(np.zeros(32, bool)) == []
    live[:] = False
    live[1] = True  # a lone row moves to slot 0: its multi-token ticks then step one slot
    assert lane.compaction(live) == [(1, 0)]
    live = np.zeros(32, bool)
    live[0] = True
    assert (lane.step_rows(live, 1), lane.step_rows(live, 8)) == (2, 1)
    assert lane.max_moves() == 16


async def _decode(engine: Engine) -> tuple[list, list[str]]:
    """FIRST's rows join together; once the short ones ended and the long one moved down,
    LATER's rows join: (every row's Decoded, the tick phases seen)."""
    phases = []
    batcher = ContinuousBatcher(
        lambda group, jobs: [],
        engine.lanes[0],
        GROUP,
        0,
        16,
        on_phase=lambda p, s: phases.append(p),
    )
    await batcher.start()
    later: list[asyncio.Future] = []

    def after_the_move(token: int) -> None:
        if "compact" in phases and not later:
            later.extend(batcher.submit(GROUP, list(zip(LATER, LATER_OPTIONS))))

    try:
        first = batcher.submit(
            GROUP, list(zip(FIRST, FIRST_OPTIONS)), on_tokens=[None] * 3 + [after_the_move]
        )
        done = await asyncio.gather(*first)
        assert later, "the long row never moved"
        return [*done, *await asyncio.gather(*later)], phases
    finally:
        await batcher.stop()


@pytest.mark.slow
@pytest.mark.parametrize("tokens_per_tick", [1, 4])
def test_rows_moved_and_rows_admitted_after_decode_as_generate_and_static(
    tokens_per_tick, tiny_model
):
    settings = dataclasses.replace(TEST_SETTINGS, tokens_per_tick=tokens_per_tick)
    engine = Engine(tiny_model, settings)
    for shape in engine.warmup_shapes():
        if shape.before_ready:
            shape.run()
    assert any(shape.name.startswith("move") for shape in engine.warmup_shapes())
    with compiled_programs() as compiled:
        decoded, phases = asyncio.run(_decode(engine))
    assert compiled == []  # the compaction's program is warm-up's too
    assert "compact" in phases

    rows, options = FIRST + LATER, FIRST_OPTIONS + LATER_OPTIONS
    features, _ = tiny_model.predict_features(rows, 16, 8)
    static = StepDecoder(tiny_model.t5x_model).decode(
        engine.params, features, settings.max_new_tokens_limit, options
    )
    assert [d.tokens for d in decoded] == [s.tokens for s in static]
    np.testing.assert_allclose(
        [d.log_likelihood for d in decoded], [s.log_likelihood for s in static], rtol=1e-5
    )
    for row, option, made in zip(rows, options, decoded):
        if option.temperature == 0:
            assert (
                made.tokens
                == tiny_model.generate([row], max_length=option.max_new_tokens)[0].tolist()[
                    : len(made.tokens)
                ]
            )
