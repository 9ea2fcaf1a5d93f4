"""Several tokens per device call (multi-token ticks) make the very tokens one-token calls
make, and `Model.generate` makes, greedy and sampled, in slots and in static batches; scores
left off change no token; a call writes back only the cache positions it wrote; and once
warm, no request kind compiles a program under either scheduler, multi-token ticks included."""

import asyncio

import httpx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from server_helpers import compiled_programs, metric_value, running_server

from t5forge.models.layers import stack_projections
from t5forge.serving.slots import SlotDecoder, _written_back
from t5forge.serving.stepwise import RowOptions, StepDecoder

ROWS = [[5, 9, 3, 12, 7, 1], [14, 3, 1], [7, 7, 8, 9, 10, 11, 12, 13, 14, 15, 1]]
OPTIONS = [
    RowOptions(11),
    RowOptions(11, temperature=1.0, seed=3),
    RowOptions(9, temperature=0.7, top_k=5, seed=4, scored=False),
]
TEXT = "Click the Save button."


def _slot_decode(model, params, ticks: int):
    """ROWS decoded in 4 slots, `ticks` tokens per call: row 0 alone for one call, then rows
    1 and 2 join (in slots 0 and 3); ({row: tokens}, {row: log-likelihood})."""
    slots = SlotDecoder(model.t5x_model, slots=4, cache_length=12, encoder_width=16)
    pool = slots.empty_pool(params)
    made, scores = {row: [] for row in range(3)}, dict.fromkeys(range(3), 0.0)
    live, row_of = np.zeros(4, bool), {}
    for call in range(13):
        if call in (0, 1):
            joining = [0] if call == 0 else [1, 2]
            slot_ids = [2] if call == 0 else [0, 3]
            batch, _ = model.predict_features([ROWS[r] for r in joining], 16, len(joining))
            pool = slots.admit(params, pool, batch, slot_ids, [OPTIONS[r] for r in joining])
            live[slot_ids] = True
            row_of.update(zip(slot_ids, joining))
        pool, tokens, log_likelihood = jax.device_get(slots.step(params, pool, live, ticks=ticks))
        if ticks == 1:
            tokens, log_likelihood = tokens[None], log_likelihood[None]
        for tick in range(ticks):
            for slot in np.flatnonzero(live):
                row = row_of[slot]
                made[row].append(int(tokens[tick, slot]))
                scores[row] += float(log_likelihood[tick, slot])
                ended = made[row][-1] == model.t5x_model.eos_id
                if ended or len(made[row]) == OPTIONS[row].max_new_tokens:
                    live[slot] = False
    return made, scores


@pytest.mark.parametrize("ticks", [1, 4])
def test_a_call_writes_back_exactly_the_positions_it_wrote(ticks):
    """The pool after a call equals the whole stepped rows written back, for rows that start
    at the cache's first position, inside it, near its end and at its last position (where a
    row keeps rewriting the last one); rows past the stepped ones are untouched."""
    rng = np.random.default_rng(0)
    slots, heads, length, dim = 6, 2, 10, 3
    pool = rng.normal(size=(slots, heads, length, dim)).astype(np.float32)
    started = np.array([0, 4, length - 3, length - 1])
    stepped = pool[: len(started)].copy()
    for row, start in enumerate(started):
        for tick in range(ticks):
            stepped[row, :, min(start + tick, length - 1)] = rng.normal(size=(heads, dim))
    expected = pool.copy()
    expected[: len(started)] = stepped
    got = _written_back(jnp.asarray(pool), jnp.asarray(stepped), started=started, ticks=ticks)
    np.testing.assert_array_equal(np.asarray(got), expected)


@pytest.mark.slow
def test_multi_token_ticks_equal_one_token_ticks_static_batches_and_generate(tiny_model):
    model = tiny_model
    params = stack_projections(model.params)
    one, one_scores = _slot_decode(model, params, ticks=1)
    many, many_scores = _slot_decode(model, params, ticks=4)
    assert many == one
    np.testing.assert_allclose(list(many_scores.values()), list(one_scores.values()), rtol=1e-5)
    assert many_scores[2] == 0.0 and many_scores[0] < 0.0  # row 2 asked for no score

    features, _ = model.predict_features(ROWS, 16, 4)
    for tokens_per_call in (1, 4):
        decoder = StepDecoder(model.t5x_model, tokens_per_call=tokens_per_call)
        static = decoder.decode(params, features, 12, OPTIONS)
        assert [r.tokens for r in static] == [many[row] for row in range(3)]
    # Greedy: generate() with the weights as loaded (stacked per call inside its loop).
    assert many[0] == model.generate(ROWS[:1], max_length=11)[0].tolist()
    unscored = [RowOptions(11, scored=False)] * 3
    assert decoder.decode(params, features, 12, unscored)[0].tokens == many[0]


async def _post_all(url: str, bodies: list[dict]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        return await asyncio.gather(*(client.post("/v1/predict", json=b) for b in bodies))


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["continuous", "static"])
def test_once_warm_multi_token_ticks_compile_nothing(scheduler, tiny_model):
    """Requests long enough for multi-token ticks, alone and beside others, scored or not,
        greedy and sampled, streamed or not: every program they run was compiled by the warm-up;
    the continuous scheduler's ticks are timed by phase in /metrics."""
    sampled = {"method": "sample", "seed": 3, "temperature": 0.8, "top_p": 0.9}
    bodies = [
        {"inputs": [TEXT], "max_new_tokens": 12, "return_scores": True},
        {"inputs": [TEXT, "Delete the row."], "max_new_tokens": 12, **sampled},
        {"inputs": ["Open the File menu and choose Print."], "max_new_tokens": 9},
    ]
    with running_server(tiny_model, scheduler=scheduler) as (url, _):
        with compiled_programs() as compiled:
            answers = [httpx.post(f"{url}/v1/predict", json=b, timeout=120) for b in bodies]
            answers += asyncio.run(_post_all(url, bodies))
            with httpx.stream(
                "POST", f"{url}/v1/predict", json={**bodies[0], "stream": True}, timeout=120
            ) as streamed:
                assert streamed.status_code == 200 and "done" in streamed.read().decode()
        assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
        assert compiled == []
        assert [a.json()["outputs"] for a in answers[3:]] == [
            a.json()["outputs"] for a in answers[:3]
        ]
        assert answers[0].json()["outputs"] == tiny_model.generate([TEXT], max_length=12)
        if scheduler == "continuous":  # each phase of a tick is in /metrics
            for phase in ("admit", "step", "multi_step", "host"):
                assert metric_value(url, "t5forge_tick_seconds_count", phase=phase) > 0, phase
