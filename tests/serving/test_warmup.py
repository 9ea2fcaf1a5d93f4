"""While warming up, the server refuses work with 503 + Retry-After and /healthz says how far
it got; once warm, both turn 200."""

import contextlib
import threading
import time

import httpx
import jax
import pytest
from jax._src import dispatch  # the name of JAX's compile event
from server_helpers import (
    metric_value,
    running_server,
    serving_in_thread,
    settings_on_free_port,
    wait_ready,
)

from t5forge.serving import InferenceService
from t5forge.serving.engine import WarmupShape

TEXT = "Click the Save button."
REQUESTS = [
    ("/v1/predict", {"inputs": [TEXT]}),
    ("/v1/predict", {"inputs": [TEXT], "stream": True}),
    ("/v1/score", {"inputs": [TEXT], "targets": ["Speichern."]}),
    ("/v1/classify", {"inputs": [TEXT], "choices": ["Ja.", "Nein."]}),
]


def _first_health(url: str, timeout: float = 60.0) -> httpx.Response:
    """/healthz's first answer, once the server listens."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            return httpx.get(f"{url}/healthz", timeout=5)
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer in {timeout} s")


def test_requests_during_warm_up_get_503_until_it_finishes(tiny_model):
    release = threading.Event()
    service = InferenceService(tiny_model, settings_on_free_port())
    # Two warm-up shapes; the first holds the device until released.
    service.engine.warmup_shapes = lambda: [
        WarmupShape("held", 0, lambda: release.wait(120)),
        WarmupShape("quick", 1, lambda: None),
    ]
    with serving_in_thread(service) as url:
        try:
            health = _first_health(url)
            assert health.status_code == 503 and health.headers["retry-after"] == "1"
            assert health.json() == {
                "status": "warming up",
                "compiled": 0,
                "of": 2,
                "shapes": {"held": "compiling", "quick": "waiting"},
            }
            for path, body in REQUESTS:
                refused = httpx.post(f"{url}{path}", json=body, timeout=30)
                assert refused.status_code == 503, refused.text
                assert refused.headers["retry-after"] == "1"
                assert set(refused.json()) == {"error"} and "\n" not in refused.json()["error"]
                assert "still compiling its models (warm-up)" in refused.json()["error"]
            assert metric_value(url, "t5forge_rejected_total", reason="warming_up") == len(REQUESTS)
            assert httpx.get(f"{url}/healthz").status_code == 503  # refusals change nothing
        finally:
            release.set()
        wait_ready(url, timeout=60)
        assert httpx.get(f"{url}/healthz").json() == {
            "status": "ready",
            "compiled": 2,
            "of": 2,
            "shapes": {"held": "ready", "quick": "ready"},
        }
        answer = httpx.post(f"{url}/v1/predict", json={"inputs": [TEXT]}, timeout=120)
        assert answer.status_code == 200 and len(answer.json()["outputs"]) == 1


def test_scoring_and_beam_shapes_compile_while_the_server_serves(tiny_model):
    release = threading.Event()
    service = InferenceService(tiny_model, settings_on_free_port())
    warmed = service.engine.warmup_shapes()
    generation = [shape for shape in warmed if shape.before_ready]
    # Generation's real shapes, then one scoring shape held until released.
    service.engine.warmup_shapes = lambda: [
        *generation,
        WarmupShape("score held", 0, lambda: release.wait(120), before_ready=False),
    ]
    with serving_in_thread(service) as url:
        try:
            wait_ready(url, every_shape=False)
            health = httpx.get(f"{url}/healthz").json()
            assert health["status"] == "ready" and health["of"] == len(generation) + 1
            assert health["compiled"] == len(generation)
            assert health["shapes"]["score held"] == "compiling"
            answer = httpx.post(f"{url}/v1/predict", json={"inputs": [TEXT]}, timeout=120)
            assert answer.status_code == 200 and len(answer.json()["outputs"]) == 1
        finally:
            release.set()
        wait_ready(url, timeout=60)
        assert httpx.get(f"{url}/healthz").json()["shapes"]["score held"] == "ready"


@pytest.mark.parametrize("scheduler", ["continuous", "static"])
def test_once_warm_no_request_compiles_a_program(scheduler, request, tiny_model):
    """The warm-up compiles the very programs requests run (same functions, shapes and static
    options), although it runs none of them: requests of every kind compile nothing new.
    Traces are not counted: JAX's trace caches are bounded per process, and a test worker
    that traced hundreds of other tests' programs first once re-traced beam search's (a
    fraction of a second, its compiled program reused) in the parallel suite."""
    if scheduler == "continuous":
        url, _ = request.getfixturevalue("server")
        _no_request_compiles(url)
    else:
        with running_server(tiny_model, scheduler="static") as (url, _):
            _no_request_compiles(url)


def _no_request_compiles(url: str) -> None:
    events = []

    def record(event: str, duration: float, **details) -> None:
        if event == dispatch.BACKEND_COMPILE_EVENT:
            events.append((event, details.get("fun_name")))

    sampled = {"method": "sample", "seed": 3, "temperature": 0.8, "top_k": 5}
    requests = [
        ("/v1/predict", {"inputs": [TEXT]}),
        (
            "/v1/predict",
            {
                "inputs": [TEXT, "Delete the row.", "Open the File menu and choose Print."],
                **sampled,
            },
        ),
        ("/v1/predict", {"inputs": [TEXT], "stream": True, "max_new_tokens": 12}),
        ("/v1/predict", {"inputs": [TEXT], "method": "beam", "num_beams": 2}),
        ("/v1/score", {"inputs": [TEXT, TEXT], "targets": ["Speichern.", "Nein."]}),
        ("/v1/classify", {"inputs": [TEXT], "choices": ["Ja.", "Nein."]}),
    ]
    jax.monitoring.register_event_duration_secs_listener(record)
    try:
        for path, body in requests:
            answer = httpx.post(f"{url}{path}", json=body, timeout=120)
            assert answer.status_code == 200, answer.text
    finally:
        jax.monitoring.unregister_event_duration_listener(record)
    assert events == [], events
