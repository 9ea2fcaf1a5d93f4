"""Continuous batching: rows that join a running batch at any step decode exactly as in a
static batch and as `Model.generate`; a short request overtakes a long one; a burst loses
nothing."""

import asyncio
import json
import time

import httpx
import jax
import numpy as np

from t5forge.serving.slots import SlotDecoder
from t5forge.serving.stepwise import RowOptions, StepDecoder

TEXTS = ["Click the Save button.", "Delete the row.", "Open the File menu and choose Print."]
SAMPLED = {"method": "sample", "seed": 11, "temperature": 0.9, "top_k": 8}


def test_slots_joined_at_other_steps_decode_as_a_static_batch(server, tiny_model):
    # The served model's own slot shapes (4 slots, 12 new tokens, inputs up to 16), which
    # the server's warm-up has compiled already.
    model = tiny_model
    rows = [[5, 9, 3, 12, 7, 1], [14, 3, 1], [7, 7, 8, 9, 10, 11, 12, 13, 14, 15, 1]]
    options = [
        RowOptions(10),
        RowOptions(10, temperature=1.0, seed=3),
        RowOptions(7, temperature=0.7, top_k=5, seed=4),
    ]
    features, _ = model.predict_features(rows, 16, 4)
    static = StepDecoder(model.t5x_model).decode(model.params, features, 12, options)

    slots = SlotDecoder(model.t5x_model, slots=4, cache_length=12, encoder_width=16)
    pool = slots.empty_pool(model.params)
    made = {row: [] for row in range(3)}
    log_likelihood = dict.fromkeys(range(3), 0.0)
    live, row_of = np.zeros(4, bool), {}
    for step in range(14):
        if step in (0, 2):  # row 0 alone first, rows 1 and 2 join two steps later
            joining = [0] if step == 0 else [1, 2]
            slot_ids = [2] if step == 0 else [0, 3]
            batch, _ = model.predict_features([rows[r] for r in joining], 16, len(joining))
            pool = slots.admit(model.params, pool, batch, slot_ids, [options[r] for r in joining])
            live[slot_ids] = True
            row_of.update(zip(slot_ids, joining))
        pool, tokens, scores = jax.device_get(slots.step(model.params, pool, live))
        for slot in np.flatnonzero(live):
            row = row_of[slot]
            made[row].append(int(tokens[slot]))
            log_likelihood[row] += float(scores[slot])
            if (
                tokens[slot] == model.t5x_model.eos_id
                or len(made[row]) == options[row].max_new_tokens
            ):
                live[slot] = False
    assert [made[row] for row in range(3)] == [r.tokens for r in static]
    assert made[0] == model.generate(rows[:1], max_length=10)[0].tolist()
    np.testing.assert_allclose(
        [log_likelihood[row] for row in range(3)], [r.log_likelihood for r in static], rtol=1e-5
    )


async def _post_all(url: str, bodies: list[dict]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        return await asyncio.gather(*(client.post("/v1/predict", json=b) for b in bodies))


def test_continuous_answers_equal_static_ones_and_the_python_api(server, static_server, tiny_model):
    (url, _), (static_url, _) = server, static_server
    bodies = [
        {"inputs": TEXTS, "max_new_tokens": 12},
        {"inputs": TEXTS[:2], "max_new_tokens": 5, **SAMPLED},
        {"inputs": TEXTS[2:], "max_new_tokens": 9, "method": "sample", "seed": 3, "top_p": 0.8},
    ]
    continuous = [r.json() for r in asyncio.run(_post_all(url, bodies))]
    static = [r.json() for r in asyncio.run(_post_all(static_url, bodies))]
    assert continuous == static
    assert continuous[0]["outputs"] == tiny_model.generate(TEXTS, max_length=12)


def test_a_short_request_overtakes_a_running_long_one(server, monkeypatch):
    url, service = server
    lane, calls = service.engine.lanes[0], []

    def after_short_queued(step):
        """After the long row's first token, its next device call waits until the short
        request is queued (at most 60 s): without it the long row's remaining tokens take
        one multi-token call, which can end before the short request arrives."""

        def gated(live):
            if calls:
                waited = time.monotonic()
                while not service.depth and time.monotonic() - waited < 60:
                    time.sleep(0.005)
            calls.append(live)
            return step(live)

        return gated

    monkeypatch.setattr(lane, "step", after_short_queued(lane.step))
    monkeypatch.setattr(lane, "steps", after_short_queued(lane.steps))
    long_body = {"inputs": [TEXTS[2]], "max_new_tokens": 12, "stream": True}
    order = []

    async def long_then_short():
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:

            async def long():
                async with client.stream("POST", "/v1/predict", json=long_body) as response:
                    async for line in response.aiter_lines():
                        if line.startswith("data: {") and "token" in json.loads(line[6:]):
                            started.set()
                order.append("long")

            async def short():
                await started.wait()
                response = await client.post(
                    "/v1/predict", json={"inputs": [TEXTS[1]], "max_new_tokens": 1}
                )
                assert response.status_code == 200
                order.append("short")

            started = asyncio.Event()
            await asyncio.gather(long(), short())

    asyncio.run(long_then_short())
    assert order == ["short", "long"]


def test_a_burst_loses_no_request(server, tiny_model):
    url, service = server
    texts = [f"{TEXTS[i % 3]} {i}" for i in range(24)]
    lengths = [4 if i % 3 else 12 for i in range(24)]
    bodies = [{"inputs": [t], "max_new_tokens": n} for t, n in zip(texts, lengths)]
    responses = asyncio.run(_post_all(url, bodies))
    expected = {n: tiny_model.generate(texts, max_length=n) for n in set(lengths)}
    answered = [i for i, r in enumerate(responses) if r.status_code == 200]
    # max_queue 8 beside 4 slots: the burst's first 8 always queue; the others are answered
    # or refused with 503 + Retry-After, never dropped.
    assert len(answered) >= 8
    for i, response in enumerate(responses):
        if i in answered:
            assert response.json()["outputs"] == [expected[lengths[i]][i]]
        else:
            assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert service.running == 0 and service.depth == 0
