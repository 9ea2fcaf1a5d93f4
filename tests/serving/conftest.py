"""Real servers on free loopback ports, serving a tiny random T5 with the tiny vocabulary.

uvicorn runs in a thread of the test process (the SIGTERM test starts the real command in a
subprocess instead); clients are real httpx clients over TCP.
"""

import jax
import pytest
from server_helpers import (
    TINY_CONFIG,
    running_server,
    serving_in_thread,
    settings_on_free_port,
    wait_ready,
)

import t5forge
from t5forge.interop.huggingface import save_hf_dir
from t5forge.models.model import build_model
from t5forge.serving import InferenceService


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory, tiny_vocab):
    """A Hugging Face directory: random tiny weights and the 1000-piece vocabulary."""
    path = tmp_path_factory.mktemp("served_hf")
    params = jax.device_get(build_model(TINY_CONFIG).init_params(jax.random.PRNGKey(0)))
    save_hf_dir(params, TINY_CONFIG, path, vocab_path=tiny_vocab, extra_ids=100)
    return path


@pytest.fixture(scope="session")
def tiny_model(tiny_hf_dir):
    return t5forge.load(tiny_hf_dir)


@pytest.fixture(scope="session")
def server(tiny_model):
    """(base url, service) of the shared test server (input length policy 'refuse')."""
    with running_server(tiny_model) as running:
        yield running


@pytest.fixture(scope="session")
def static_server(tiny_model):
    """(base url, service) of a server with the static scheduler. It skips the warm-up (its
    tests compile only the shapes they use; the warm-up is tested on the default server)."""
    service = InferenceService(tiny_model, settings_on_free_port(scheduler="static"))
    service.engine.warmup_shapes = list
    with serving_in_thread(service) as url:
        wait_ready(url)
        yield url, service
