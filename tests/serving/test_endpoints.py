"""Each endpoint against the running server, checked against the Python API on the same model."""

import json

import httpx
import numpy as np
import pytest

TEXTS = ["Click the Save button.", "Deletes the selected rows in the table."]


def post(url, path, body, **kwargs):
    return httpx.post(f"{url}{path}", json=body, timeout=120, **kwargs)


def test_greedy_and_beam_predict_match_the_python_api(server, tiny_model):
    url, _ = server
    greedy = post(url, "/v1/predict", {"inputs": TEXTS, "max_new_tokens": 6})
    assert greedy.status_code == 200
    assert greedy.json() == {
        "outputs": tiny_model.generate(TEXTS, max_length=6),
        "truncated": [False, False],
    }
    beam = post(
        url,
        "/v1/predict",
        {
            "inputs": TEXTS,
            "method": "beam",
            "num_beams": 2,
            "max_new_tokens": 6,
            "return_scores": True,
        },
    ).json()
    assert beam["outputs"] == tiny_model.generate(TEXTS, max_length=6, method="beam", num_beams=2)
    assert len(beam["scores"]) == 2 and all(s < 0 for s in beam["scores"])


def test_returned_scores_are_the_outputs_log_likelihoods(server, tiny_model):
    url, _ = server
    answer = post(
        url, "/v1/predict", {"inputs": TEXTS[:1], "max_new_tokens": 4, "return_scores": True}
    ).json()
    tokens = tiny_model.generate(tiny_model.encode(TEXTS[:1]).rows, max_length=4)
    expected = tiny_model.score(tiny_model.encode(TEXTS[:1]).rows, [tokens[0].tolist()])
    np.testing.assert_allclose(answer["scores"], expected, rtol=1e-4)


def test_sampling_is_reproducible_by_seed_and_varies_with_it(server):
    url, _ = server
    body = {"inputs": TEXTS, "method": "sample", "temperature": 1.5, "max_new_tokens": 8}
    first = post(url, "/v1/predict", {**body, "seed": 1}).json()["outputs"]
    assert post(url, "/v1/predict", {**body, "seed": 1}).json()["outputs"] == first
    others = {
        tuple(post(url, "/v1/predict", {**body, "seed": s}).json()["outputs"]) for s in (2, 3, 4)
    }
    assert others - {tuple(first)}


def test_score_matches_the_python_api(server, tiny_model):
    url, _ = server
    targets = ["Klicken Sie auf Speichern.", "Löscht die Zeilen."]
    answer = post(url, "/v1/score", {"inputs": TEXTS, "targets": targets})
    assert answer.status_code == 200
    np.testing.assert_allclose(answer.json()["scores"], tiny_model.score(TEXTS, targets), rtol=1e-5)


def test_classify_ranks_every_choice_by_its_score(server, tiny_model):
    url, _ = server
    choices = ["yes", "no", "maybe later"]
    answer = post(url, "/v1/classify", {"inputs": TEXTS, "choices": choices}).json()
    for text, result in zip(TEXTS, answer["results"]):
        expected = tiny_model.score([text] * 3, choices)
        ranked = [r["choice"] for r in result["ranked"]]
        assert ranked == [choices[i] for i in np.argsort(-expected)]
        assert result["prediction"] == ranked[0]
        np.testing.assert_allclose(
            sorted((r["score"] for r in result["ranked"]), reverse=True),
            sorted(expected, reverse=True),
            rtol=1e-5,
        )
    per_input = post(url, "/v1/classify", {"inputs": TEXTS, "choices": [["a", "b"], ["c"]]})
    assert [len(r["ranked"]) for r in per_input.json()["results"]] == [2, 1]


def _events(response) -> list:
    return [
        json.loads(line[len("data: ") :]) if line != "data: [DONE]" else "[DONE]"
        for line in response.iter_lines()
        if line.startswith("data: ")
    ]


@pytest.mark.parametrize("options", [{}, {"method": "sample", "seed": 5, "top_p": 0.9}])
def test_streamed_tokens_add_up_to_the_plain_answer(server, options):
    url, _ = server
    body = {"inputs": TEXTS, "max_new_tokens": 8, **options}
    plain = post(url, "/v1/predict", body).json()["outputs"]
    with httpx.stream(
        "POST", f"{url}/v1/predict", json={**body, "stream": True}, timeout=120
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _events(response)
    assert events[-1] == "[DONE]"
    for index, output in enumerate(plain):
        tokens = [e for e in events[:-1] if e["index"] == index and "token" in e]
        assert "".join(e["text"] for e in tokens).strip() == output
        final = [e for e in events[:-1] if e["index"] == index and e.get("done")]
        seed = {"seed": options["seed"]} if "seed" in options else {}
        assert final == [
            {"index": index, "output": output, "truncated": False, "done": True, **seed}
        ]


def test_health_metrics_and_openapi(server):
    url, service = server
    health = httpx.get(f"{url}/healthz").json()
    assert health["status"] == "ready" and health["compiled"] == health["of"]
    assert health["of"] == len(service.shapes)
    # Generation's first, smallest first: admitting one row of up to 16 tokens, a step of the
    # first two slots (steps start at two), admitting two rows; scoring and beams after.
    assert list(health["shapes"])[:3] == ["admit 1x16", "step 2x16", "admit 2x16"]
    assert list(health["shapes"])[-1].startswith(("score", "beam"))
    assert set(health["shapes"].values()) == {"ready"}
    post(url, "/v1/score", {"inputs": TEXTS[:1], "targets": ["x"]})
    metrics = httpx.get(f"{url}/metrics").text
    for name in (
        "t5forge_requests_total",
        "t5forge_request_latency_seconds_bucket",
        "t5forge_batch_size_bucket",
        "t5forge_queue_depth",
        "t5forge_generated_tokens_total",
        "t5forge_tokens_per_second",
    ):
        assert name in metrics
    schema = httpx.get(f"{url}/openapi.json").json()
    assert {"/v1/predict", "/v1/score", "/v1/classify", "/healthz", "/metrics"} <= set(
        schema["paths"]
    )
    assert httpx.get(f"{url}/docs").status_code == 200
