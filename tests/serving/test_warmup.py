"""While warming up, the server refuses work with 503 + Retry-After and /healthz says how far
it got; once warm, both turn 200."""

import contextlib
import threading
import time

import httpx
from server_helpers import metric_value, serving_in_thread, settings_on_free_port, wait_ready

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
            "shapes": {"held": "ready", "quick": "ready"},
        }
        answer = httpx.post(f"{url}/v1/predict", json={"inputs": [TEXT]}, timeout=120)
        assert answer.status_code == 200 and len(answer.json()["outputs"]) == 1
