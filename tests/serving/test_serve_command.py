"""`t5forge serve` as a real process: a t5forge checkpoint, the API key, and SIGTERM draining."""

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import jax
import pytest
from server_helpers import TINY_CONFIG, free_port, metric_value, wait_ready

from t5forge.checkpoints.checkpointer import Checkpointer
from t5forge.models.model import build_model

API_KEY = "test-key-0123456789"
TEXT = "Click the Save button."


@pytest.fixture(scope="module")
def t5forge_run(tmp_path_factory, tiny_vocab):
    """A t5forge model dir as training leaves it: checkpoint, metadata and spiece.model."""
    run = tmp_path_factory.mktemp("served_run")
    checkpointer = Checkpointer(run, async_save=False)
    params = jax.device_get(build_model(TINY_CONFIG).init_params(jax.random.PRNGKey(1)))
    checkpointer.save(
        3,
        {"params": params},
        force=True,
        metadata={
            "model_config": dataclasses.asdict(TINY_CONFIG),
            "vocabulary": {"extra_ids": 100},
            "task_feature_lengths": {"inputs": 16, "targets": 16},
        },
    )
    checkpointer.close()
    shutil.copyfile(tiny_vocab, run / "spiece.model")
    return run


@pytest.mark.slow
def test_serve_command_checks_the_key_and_drains_on_sigterm(t5forge_run):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "t5forge",
            "serve",
            "--checkpoint",
            str(t5forge_run),
            "--port",
            str(port),
            "--api_key",
            API_KEY,
            "--max_batch_size",
            "2",
            "--warmup_num_beams",
            "0",
            "--allow_new_beam_shapes",
            "--scheduler",
            "continuous",
            "--max_new_tokens",
            "6",
            "--max_new_tokens_limit",
            "12",
            "--max_target_length",
            "16",
            "--log_level",
            "warning",
        ],
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_ready(url, process=process)
        # The command re-executed itself on mimalloc (serving/allocator.py), in the same process.
        assert "libmimalloc" in Path(f"/proc/{process.pid}/maps").read_text()
        auth = {"Authorization": f"Bearer {API_KEY}"}
        body = {"inputs": [TEXT], "max_new_tokens": 4}
        for headers in ({}, {"Authorization": "Bearer wrong-key-0123456789"}):
            refused = httpx.post(f"{url}/v1/predict", json=body, headers=headers)
            assert refused.status_code == 401 and "API key" in refused.json()["error"]
        assert httpx.get(f"{url}/metrics").status_code == 401
        assert httpx.get(f"{url}/healthz").status_code == 200  # probes need no key
        assert (
            httpx.post(f"{url}/v1/predict", json=body, headers=auth, timeout=60).status_code == 200
        )

        # Beam search with 3 beams was not warmed up (--allow_new_beam_shapes lets it
        # compile): compiling it keeps it in flight, and the greedy rows queued behind it.
        in_flight = {}
        bodies = {
            "beam": {"inputs": [TEXT], "method": "beam", "num_beams": 3, "max_new_tokens": 5},
            "greedy": {"inputs": [TEXT, "Delete the row."], "max_new_tokens": 12},
        }
        clients = [
            threading.Thread(
                target=lambda name=name: in_flight.update(
                    {
                        name: httpx.post(
                            f"{url}/v1/predict", headers=auth, timeout=120, json=bodies[name]
                        )
                    }
                )
            )
            for name in bodies
        ]
        for client in clients:
            client.start()
            time.sleep(0.5)
        deadline = time.monotonic() + 60  # until the greedy rows wait behind the beam
        while "greedy" not in in_flight and time.monotonic() < deadline:
            if metric_value(url, "t5forge_queue_depth", headers=auth) >= 2:
                break
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with pytest.raises(httpx.TransportError):  # no longer accepting
            httpx.post(f"{url}/v1/predict", json=body, headers=auth, timeout=5)
        for client in clients:
            client.join(timeout=120)
        assert {name: r.status_code for name, r in in_flight.items()} == {
            "beam": 200,
            "greedy": 200,
        }
        assert [len(in_flight[name].json()["outputs"]) for name in bodies] == [1, 2]
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = process.stdout.read()
    assert "Traceback" not in output, output


def test_t5x_checkpoints_serve_with_a_config_and_a_vocabulary(shared_data, test_spm_path):
    from t5forge.errors import T5ForgeError
    from t5forge.serving import InferenceService, ServerSettings
    from t5forge.serving.server import load_for_serving

    checkpoint = shared_data / "t5x_testdata" / "test_t5_tiny.checkpoint_0"
    with pytest.raises(T5ForgeError, match="no vocabulary .* pass --vocab PATH") as raised:
        InferenceService(load_for_serving(checkpoint, config="t5_1_1/tiny"), ServerSettings())
    assert "\n" not in str(raised.value)
    model = load_for_serving(checkpoint, vocab=test_spm_path, extra_ids=0, config="t5_1_1/tiny")
    service = InferenceService(model, ServerSettings(max_input_length=64))
    assert service.model.vocabulary.vocab_size == 26
    assert service.engine.input_buckets.sizes() == (16, 64)
