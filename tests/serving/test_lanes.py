"""Decode lanes: continuous batching's slots split into pools stepping on their own threads.
Rows spread over the lanes decode exactly as in one lane and as `Model.generate`, nothing
compiles once warm, and the queue limit holds over all lanes."""

import asyncio
import dataclasses

import httpx
import pytest
from server_helpers import TEST_SETTINGS, compiled_programs, running_server

from t5forge.errors import ConfigError
from t5forge.serving import InferenceService
from t5forge.serving.batcher import QueueFull
from t5forge.serving.service import _GENERATE
from t5forge.serving.stepwise import RowOptions

TEXTS = ["Click the Save button.", "Delete the row.", "Open the File menu and choose Print."]


@pytest.mark.parametrize("lanes", [0, 5, True])
def test_a_lane_count_outside_the_batch_is_refused(lanes):
    with pytest.raises(ConfigError, match="decode_lanes"):
        dataclasses.replace(TEST_SETTINGS, decode_lanes=lanes)


async def _post_all(url: str, bodies: list[dict]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        return await asyncio.gather(*(client.post("/v1/predict", json=b) for b in bodies))


def test_rows_spread_over_two_lanes_decode_as_one_lane_and_generate(server, tiny_model):
    one_lane_url, _ = server
    bodies = [
        {"inputs": TEXTS + [TEXTS[0] + " Now."], "max_new_tokens": 12},
        {"inputs": TEXTS[:2], "max_new_tokens": 5, "method": "sample", "seed": 11, "top_k": 8},
        {"inputs": [TEXTS[2]], "max_new_tokens": 9, "method": "sample", "seed": 3, "top_p": 0.8},
        {"inputs": [TEXTS[1]], "max_new_tokens": 7, "stream": True},
    ]
    with running_server(tiny_model, decode_lanes=2) as (url, service):
        lanes = service.engine.lanes
        assert [lane.slots.slots for lane in lanes] == [2, 2]
        assert not any(name.startswith("step 4x") for name in service.shapes)
        admitted = [[] for _ in lanes]
        for lane, rows in zip(lanes, admitted):
            admit = lane.admit

            def counting(new_rows, options, slot_ids, compile_only=False, _a=admit, _r=rows):
                _r.extend(slot_ids)
                return _a(new_rows, options, slot_ids, compile_only)

            lane.admit = counting
        with compiled_programs() as compiled:
            answers = asyncio.run(_post_all(url, bodies))
        assert compiled == []  # the lanes share the warm-up's programs
        assert all(rows for rows in admitted), admitted  # both lanes decoded rows
        assert service.running == 0 and service.depth == 0
    one_lane = asyncio.run(_post_all(one_lane_url, bodies))
    assert [a.text for a in answers] == [a.text for a in one_lane]
    assert answers[0].json()["outputs"] == tiny_model.generate(bodies[0]["inputs"], max_length=12)


def test_rows_go_to_the_least_busy_lane_and_the_queue_limit_holds_over_all(tiny_model):
    service = InferenceService(tiny_model, dataclasses.replace(TEST_SETTINGS, decode_lanes=2))
    service.ready = True  # no warm-up and no workers: submitted rows stay queued
    row = ([5, 9, 1], RowOptions(4))

    async def submit():
        service._submit(_GENERATE, [row] * 3)  # spread 2 + 1
        service._submit(_GENERATE, [row] * 3)  # the second lane first: 3 + 3
        assert [batcher.depth for batcher in service.batchers] == [3, 3]
        service._submit(_GENERATE, [row] * 2)  # max_queue 8 rows over both lanes
        with pytest.raises(QueueFull, match="8 rows are waiting"):
            service._submit(_GENERATE, [row])
        assert service.depth == TEST_SETTINGS.max_queue
        for batcher in service.batchers:
            await batcher.stop()

    asyncio.run(submit())
