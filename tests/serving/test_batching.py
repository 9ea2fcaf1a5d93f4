"""Batching: concurrent requests share device batches (static) or decoding steps
(continuous), and mixing options is safe under both schedulers."""

import asyncio

import httpx
import pytest
from server_helpers import metric_value

TEXT = "Click the Save button."
STATS = ("count", "sum")


async def _concurrently(url: str, bodies: list[dict]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        return await asyncio.gather(*(client.post("/v1/predict", json=b) for b in bodies))


def test_concurrent_requests_are_grouped_into_one_batch(static_server):
    url, _ = static_server
    before = (
        metric_value(url, "t5forge_batch_size_count", kind="generate"),
        metric_value(url, "t5forge_batch_size_sum", kind="generate"),
    )
    bodies = [{"inputs": [f"{TEXT} {i}"], "max_new_tokens": 4} for i in range(4)]
    responses = asyncio.run(_concurrently(url, bodies))
    assert [r.status_code for r in responses] == [200] * 4
    after = (
        metric_value(url, "t5forge_batch_size_count", kind="generate"),
        metric_value(url, "t5forge_batch_size_sum", kind="generate"),
    )
    # Four one-row requests, max_batch_size 4: one device batch of four rows.
    assert (after[0] - before[0], after[1] - before[1]) == (1, 4)


@pytest.mark.parametrize("scheduler", ["continuous", "static"])
def test_rows_with_different_options_in_one_batch_decode_as_if_alone(scheduler, request):
    url, _ = request.getfixturevalue("server" if scheduler == "continuous" else "static_server")
    bodies = [
        {"inputs": [TEXT], "max_new_tokens": 8},
        {"inputs": [TEXT], "method": "sample", "seed": 7, "temperature": 0.8, "max_new_tokens": 3},
        {"inputs": [TEXT], "method": "sample", "seed": 8, "top_k": 5, "max_new_tokens": 8},
        {"inputs": [TEXT, "Delete the row."], "method": "sample", "seed": 9, "top_p": 0.8},
    ]
    before = [metric_value(url, f"t5forge_batch_size_{s}", kind="generate") for s in STATS]
    together = [r.json()["outputs"] for r in asyncio.run(_concurrently(url, bodies))]
    batches, rows = [
        metric_value(url, f"t5forge_batch_size_{s}", kind="generate") - b
        for s, b in zip(STATS, before)
    ]
    alone = [httpx.post(f"{url}/v1/predict", json=b, timeout=120).json()["outputs"] for b in bodies]
    assert rows > batches  # they did share batches (static) or steps (continuous)
    assert together == alone
    assert len(together[1][0].split()) <= 3  # its own max_new_tokens, not the batch's


def test_beam_requests_batch_apart_from_stepwise_ones(server):
    url, _ = server
    before = metric_value(url, "t5forge_batch_size_count", kind="beam")
    bodies = [
        {"inputs": [TEXT], "method": "beam", "num_beams": 2},
        {"inputs": [TEXT], "method": "beam", "num_beams": 2},
        {"inputs": [TEXT]},
    ]
    responses = asyncio.run(_concurrently(url, bodies))
    assert [r.status_code for r in responses] == [200] * 3
    assert responses[0].json() == responses[1].json()
    assert metric_value(url, "t5forge_batch_size_count", kind="beam") - before == 1
