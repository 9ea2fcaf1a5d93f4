"""What the serving tests share: the tiny model's config, the test settings, a server in a
thread, waiting for readiness, and reading /metrics."""

import contextlib
import dataclasses
import socket
import threading
import time

import httpx
import jax
from jax._src import dispatch  # the name of JAX's compile event
from tiny_model import TINY_CONFIG as TINY_CONFIG  # the serving tests import it from here

from t5forge.serving import InferenceService, ServerSettings, create_app
from t5forge.serving.server import uvicorn_config

# Small limits so every limit is reachable; max_wait_ms long enough that concurrent test
# requests always meet in one batch; continuous batching (the static scheduler has a
# server of its own, conftest.static_server).
TEST_SETTINGS = ServerSettings(
    max_batch_size=4,
    max_wait_ms=200,
    max_queue=8,
    max_items=8,
    max_body_bytes=20_000,
    max_new_tokens=6,
    max_new_tokens_limit=12,
    max_target_length=16,
    max_num_beams=4,
    warmup_num_beams=2,
    max_input_length=16,
    scheduler="continuous",
    # No stored executables: every test server compiles, as a first start does (the stores
    # have tests of their own, in temporary directories).
    compile_cache="",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(
    base_url: str, timeout: float = 300.0, process=None, every_shape: bool = True
) -> None:
    """Until /healthz says ready and, with `every_shape`, has compiled every shape (scoring's
    and beam search's compile after ready): tests then see no compilation mid-request."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before it was ready")
        with contextlib.suppress(httpx.TransportError):
            health = httpx.get(f"{base_url}/healthz", timeout=5)
            if health.status_code == 200:
                if not every_shape or health.json()["compiled"] == health.json()["of"]:
                    return
        time.sleep(0.2)
    raise TimeoutError(f"{base_url} not ready after {timeout} s")


@contextlib.contextmanager
def serving_in_thread(service: InferenceService):
    """Runs uvicorn on `service` in a thread; yields the base url at once (maybe not ready)."""
    import uvicorn

    settings = service.settings
    server = uvicorn.Server(uvicorn_config(create_app(service), settings, "warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        yield f"http://{settings.host}:{settings.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)


def settings_on_free_port(**changes) -> ServerSettings:
    """TEST_SETTINGS on a free port, plus changes."""
    return dataclasses.replace(TEST_SETTINGS, port=free_port(), **changes)


@contextlib.contextmanager
def running_server(model, **changes):
    """Serves `model` in a thread with TEST_SETTINGS (plus changes); yields (url, service)."""
    service = InferenceService(model, settings_on_free_port(**changes))
    with serving_in_thread(service) as url:
        wait_ready(url)
        yield url, service


def metric_value(base_url: str, sample_name: str, headers=None, **labels) -> float:
    """One sample of /metrics, parsed with prometheus_client's own parser (0 if absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{base_url}/metrics", headers=headers, timeout=30).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == sample_name and all(
                sample.labels.get(k) == v for k, v in labels.items()
            ):
                return sample.value
    return 0.0


@contextlib.contextmanager
def compiled_programs():
    """A list that gets the name of every program XLA compiles meanwhile (JAX's own event)."""
    names = []

    def record(event: str, duration: float, **details) -> None:
        if event == dispatch.BACKEND_COMPILE_EVENT:
            names.append(details.get("fun_name"))

    jax.monitoring.register_event_duration_secs_listener(record)
    try:
        yield names
    finally:
        jax.monitoring.unregister_event_duration_listener(record)
