"""`t5forge.serve(...)` embedded in a Python program, and never shadowed by a module."""

import importlib
import os
import signal
import subprocess
import sys

import httpx
import pytest
from server_helpers import free_port, wait_ready

import t5forge
from t5forge.errors import ConfigError
from t5forge.serving import ServerSettings

TEXT = "Click the Save button."


def test_t5forge_serve_stays_the_function_whatever_is_imported():
    importlib.import_module("t5forge.serving.server")
    importlib.import_module("t5forge.__main__")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("t5forge.serve")
    assert callable(t5forge.serve) and t5forge.serve.__module__ == "t5forge"


def test_a_settings_object_and_single_settings_do_not_mix():
    with pytest.raises(ConfigError, match="^pass either settings= or individual settings"):
        t5forge.serve("unused", settings=ServerSettings(), port=8001)


@pytest.mark.slow
def test_t5forge_serve_serves_until_sigterm(tiny_hf_dir, tiny_model):
    port = free_port()
    program = (
        f"import t5forge; t5forge.serve({str(tiny_hf_dir)!r}, port={port}, max_batch_size=2, "
        "max_input_length=16, max_target_length=16, max_new_tokens=4, warmup_num_beams=0, "
        "log_level='warning')"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", program],
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process=process)
        answer = httpx.post(f"{url}/v1/predict", json={"inputs": [TEXT]}, timeout=120)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {
            "outputs": tiny_model.generate([TEXT], max_length=4),
            "truncated": [False],
        }
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = process.stdout.read()
    assert "Traceback" not in output, output
