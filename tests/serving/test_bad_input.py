"""Bad input and overload: one-line JSON errors with the right status, and the server goes on."""

import asyncio
import time

import httpx
import pytest
from server_helpers import metric_value, running_server

TEXT = "Click the Save button."
LONG_TEXT = " ".join(["Click the Save button and delete the selected rows."] * 4)


def _assert_one_line_error(response, status: int, fragment: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and "\n" not in body["error"]
    assert fragment in body["error"], body["error"]


@pytest.mark.parametrize(
    "path, body, status, fragment",
    [
        ("/v1/predict", b"{not json", 400, "the body is not valid JSON"),
        ("/v1/predict", b"[1, 2]", 400, "the body must be a JSON object"),
        ("/v1/predict", {}, 422, "inputs: Field required"),
        ("/v1/predict", {"inputs": TEXT}, 422, "inputs: Input should be a valid list"),
        ("/v1/predict", {"inputs": [TEXT, 3]}, 422, "inputs.1: Input should be a valid string"),
        (
            "/v1/predict",
            {"inputs": [TEXT], "max_new_tokens": "4"},
            422,
            "max_new_tokens: Input should be a valid integer",
        ),
        ("/v1/predict", {"inputs": []}, 422, "inputs is an empty list"),
        ("/v1/predict", {"inputs": [TEXT, "  "]}, 422, "inputs[1] is empty"),
        ("/v1/predict", {"inputs": [TEXT], "top_n": 3}, 422, "top_n: unknown field"),
        ("/v1/predict", {"inputs": [TEXT], "method": "nucleus"}, 422, "method: Input should be"),
        (
            "/v1/predict",
            {"inputs": [TEXT], "temperature": 0.5},
            422,
            "temperature applies to method 'sample', not 'greedy'",
        ),
        (
            "/v1/predict",
            {"inputs": [TEXT], "method": "sample", "top_k": 5, "top_p": 0.9},
            422,
            "use top_k or top_p, not both",
        ),
        (
            "/v1/predict",
            {"inputs": [TEXT], "method": "beam", "stream": True},
            422,
            "stream works with method 'greedy' or 'sample'",
        ),
        (
            "/v1/predict",
            {"inputs": [TEXT], "max_new_tokens": 13},
            422,
            "max_new_tokens must be in [1, 12]",
        ),
        (
            "/v1/predict",
            {"inputs": [TEXT], "method": "beam", "num_beams": 9},
            422,
            "num_beams must be in [1, 4]",
        ),
        ("/v1/predict", {"inputs": [TEXT] * 9}, 413, "at most 8 per request"),
        ("/v1/predict", {"inputs": [LONG_TEXT]}, 422, "more than the model's max_input_length 16"),
        ("/v1/score", {"inputs": [TEXT], "targets": []}, 422, "targets is an empty list"),
        ("/v1/score", {"inputs": [TEXT], "targets": ["a", "b"]}, 422, "1 inputs but 2 targets"),
        ("/v1/score", {"inputs": [TEXT, TEXT], "targets": ["a", " "]}, 422, "targets[1] is empty"),
        (
            "/v1/score",
            {"inputs": [TEXT], "targets": [LONG_TEXT]},
            422,
            "the server scores at most 16",
        ),
        ("/v1/classify", {"inputs": [TEXT], "choices": []}, 422, "choices for inputs[0] are empty"),
        ("/v1/classify", {"inputs": [TEXT, TEXT], "choices": [["a"]]}, 422, "2 inputs but 1 lists"),
        (
            "/v1/classify",
            {"inputs": [TEXT], "choices": ["Ja.", "\t"]},
            422,
            "choices for inputs[0] hold an empty text",
        ),
        (
            "/v1/classify",
            {"inputs": [TEXT, TEXT], "choices": [["a"], ["b", ""]]},
            422,
            "choices for inputs[1] hold an empty text",
        ),
        ("/v1/classify", {"inputs": [TEXT] * 3, "choices": ["a", "b", "c"]}, 413, "holds 9 items"),
        ("/v1/nothing", {}, 404, "Not Found"),
    ],
)
def test_bad_requests_get_one_line_errors(server, path, body, status, fragment):
    url, _ = server
    if isinstance(body, bytes):
        response = httpx.post(
            f"{url}{path}", content=body, timeout=60, headers={"content-type": "application/json"}
        )
    else:
        response = httpx.post(f"{url}{path}", json=body, timeout=60)
    _assert_one_line_error(response, status, fragment)
    assert httpx.post(f"{url}/v1/predict", json={"inputs": [TEXT]}, timeout=60).status_code == 200


def test_bodies_over_the_size_limit_are_refused_before_parsing(server):
    url, _ = server
    big = {"inputs": ["word " * 5000]}
    _assert_one_line_error(httpx.post(f"{url}/v1/predict", json=big), 413, "limit of 20000 bytes")

    def chunks():  # no Content-Length: counted while read
        for _ in range(30):
            yield b" " * 1000

    _assert_one_line_error(
        httpx.post(
            f"{url}/v1/predict", content=chunks(), headers={"content-type": "application/json"}
        ),
        413,
        "limit of 20000 bytes",
    )


def test_long_inputs_are_truncated_when_the_server_says_so(tiny_model):
    with running_server(tiny_model, input_length_policy="truncate") as (url, _):
        answer = httpx.post(
            f"{url}/v1/predict", json={"inputs": [TEXT, LONG_TEXT]}, timeout=60
        ).json()
        assert answer["truncated"] == [False, True]
        head = tiny_model.vocabulary.decode(tiny_model.vocabulary.encode(LONG_TEXT)[:15])
        same = httpx.post(f"{url}/v1/predict", json={"inputs": [head]}, timeout=60).json()
        assert same["outputs"] == answer["outputs"][1:]
        scored = httpx.post(
            f"{url}/v1/score", json={"inputs": [LONG_TEXT], "targets": ["x"]}, timeout=60
        ).json()
        assert scored["truncated"] == [True]
        assert metric_value(url, "t5forge_truncated_inputs_total") == 2
    assert tiny_model.input_length_policy == "refuse"  # the server's policy stays its own


async def _burst(url: str, count: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        body = {"inputs": [TEXT] * 8, "max_new_tokens": 12}
        return await asyncio.gather(*(client.post("/v1/predict", json=body) for _ in range(count)))


def test_a_full_queue_answers_503_with_retry_after_and_recovers(server):
    url, _ = server
    responses = asyncio.run(_burst(url, 12))
    codes = [r.status_code for r in responses]
    assert set(codes) == {200, 503}, codes
    refused = next(r for r in responses if r.status_code == 503)
    _assert_one_line_error(refused, 503, "the server is at capacity")
    assert refused.headers["retry-after"] == "1"
    assert metric_value(url, "t5forge_rejected_total", reason="queue_full") >= 1
    assert httpx.post(f"{url}/v1/predict", json={"inputs": [TEXT]}, timeout=60).status_code == 200


def test_clients_that_disconnect_do_not_disturb_the_server(server, monkeypatch):
    url, service = server
    before = metric_value(url, "t5forge_client_disconnects_total")

    def slowed(call):  # every device call 0.3 s: 12 tokens take 3 or more, past the timeout
        def slow(live):
            time.sleep(0.3)
            return call(live)

        return slow

    for name in ("step", "steps"):  # one-token and multi-token ticks
        lane = service.engine.lanes[0]
        monkeypatch.setattr(lane, name, slowed(getattr(lane, name)))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/v1/predict", json={"inputs": [TEXT], "max_new_tokens": 12}, timeout=0.5)
    with httpx.stream(
        "POST",
        f"{url}/v1/predict",
        timeout=60,
        json={"inputs": [TEXT], "stream": True, "max_new_tokens": 12},
    ) as response:
        next(response.iter_lines())  # the first token, then hang up
    for _ in range(100):
        if metric_value(url, "t5forge_client_disconnects_total") >= before + 2:
            break
        asyncio.run(asyncio.sleep(0.2))
    assert metric_value(url, "t5forge_client_disconnects_total") == before + 2
    answer = httpx.post(f"{url}/v1/predict", json={"inputs": [TEXT]}, timeout=60)
    assert answer.status_code == 200
    assert service.running == 0  # the rows that lost their clients left their slots
