"""`t5forge serve` against hostile clients (issue 27, item 7): ambiguous framing, sockets that
never send a request, requests that would force a compile, limits that could never be met,
unseeded sampling, the API key rule, and texts that are not Unicode.

One real server process for the module, with a 1,024-descriptor limit and a 2-second
deadline for request heads, serving the session's trained tiny model.
"""

from __future__ import annotations

import contextlib
import json
import resource
import socket
import time

import httpx
import pytest
from commands import t5forge_in_process

IDLE_CONNECTIONS = 1100
DESCRIPTOR_LIMIT = 1024
HEAD_DEADLINE_S = 2
SERVER_FLAGS = (
    "--max_batch_size", "2", "--max_new_tokens", "4", "--max_new_tokens_limit", "8",
    "--max_target_length", "8", "--warmup_num_beams", "1", "--max_queue", "8",
    "--max_items", "8", "--header_timeout_s", str(HEAD_DEADLINE_S), "--log_level", "warning",
)  # fmt: skip


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _descriptor_limit(soft: int):
    """This process's soft descriptor limit set to `soft` (children inherit it), then back."""
    previous = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, previous[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, previous)


@pytest.fixture(scope="module")
def server(faults, trained):
    """(base url, port) of `t5forge serve` on the trained tiny model, at most 1,024 files."""
    port = _free_port()
    with _descriptor_limit(DESCRIPTOR_LIMIT):
        process = faults.popen(
            "serve", "--checkpoint", trained, "--port", port, *SERVER_FLAGS,
            stderr=None,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and process.poll() is None:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            time.sleep(0.5)
        assert process.poll() is None, f"the server exited with {process.returncode}"
        yield url, port
    finally:
        process.terminate()
        assert process.wait(timeout=120) == 0


def _raw_exchange(port: int, request: bytes, timeout: float = 30) -> bytes:
    """Everything the server sends back on one connection until it closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def _one_line_error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert "\n" not in error and "Traceback" not in error
    return error


def test_a_request_with_two_framings_is_refused_and_its_connection_closed(server):
    _, port = server
    body = b'{"inputs": ["x"]}'
    smuggled = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    request = (
        (
            b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(chunked)
        )
        + chunked
        + smuggled
    )
    answer = _raw_exchange(port, request)
    # One response, then the connection is closed: the bytes after it are never served.
    assert answer.count(b"HTTP/1.1 ") == 1, answer
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer
    assert b"connection: close" in head.lower()
    assert "Content-Length and Transfer-Encoding" in json.loads(payload)["error"]


def test_idle_and_slow_connections_are_closed_so_they_cannot_exhaust_descriptors(server):
    url, port = server
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < IDLE_CONNECTIONS + 200:
        pytest.skip(f"this test opens {IDLE_CONNECTIONS} sockets; the hard limit is {hard}")
    with _descriptor_limit(max(soft, IDLE_CONNECTIONS + 200)):
        idle = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(5)]
        slow = socket.create_connection(("127.0.0.1", port), timeout=60)
        slow.sendall(b"POST /v1/predict HTTP/1.1\r\nHo")  # a head that never ends
        # More sockets than the server may hold files: those beyond its limit wait in the
        # listen backlog until the deadline closes the ones before them.
        idle += [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(IDLE_CONNECTIONS)]  # fmt: skip
        try:
            started = time.monotonic()
            assert slow.recv(1) == b""  # closed by the server
            assert time.monotonic() - started < HEAD_DEADLINE_S + 5
            closed = sum(sock.recv(1) == b"" for sock in idle)
            assert closed == len(idle)
            assert time.monotonic() - started < 60
            answer = httpx.post(f"{url}/v1/predict", json={"inputs": ["Hello."]}, timeout=60)
            assert answer.status_code == 200, answer.text
        finally:
            for sock in idle + [slow]:
                sock.close()


def test_only_the_warmed_beam_program_runs(server):
    url, _ = server
    warmed = {"inputs": ["Hello."], "method": "beam", "num_beams": 1, "max_new_tokens": 4}
    assert httpx.post(f"{url}/v1/predict", json=warmed, timeout=60).status_code == 200
    for change in ({"num_beams": 2}, {"max_new_tokens": 5}):
        refused = httpx.post(f"{url}/v1/predict", json={**warmed, **change}, timeout=60)
        error = _one_line_error(refused, 422)
        assert "num_beams=1 and max_new_tokens=4 only" in error
        assert "--allow_new_beam_shapes" in error


def test_unseeded_sampling_draws_a_seed_and_returns_it(server):
    url, _ = server
    body = {"inputs": ["Hello.", "Goodbye."], "method": "sample", "max_new_tokens": 8}
    first, second = (httpx.post(f"{url}/v1/predict", json=body, timeout=60).json() for _ in "12")
    assert isinstance(first["seed"], int) and first["seed"] != second["seed"]
    again = httpx.post(f"{url}/v1/predict", json={**body, "seed": first["seed"]}, timeout=60)
    assert again.json() == first
    greedy = httpx.post(f"{url}/v1/predict", json={"inputs": ["Hello."]}, timeout=60).json()
    assert "seed" not in greedy


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/predict", b'{"inputs": ["abc \\ud800"]}'),
        ("/v1/score", b'{"inputs": ["abc"], "targets": ["x \\udfff y"]}'),
        ("/v1/classify", b'{"inputs": ["abc"], "choices": ["yes", "\\ud83d"]}'),
    ],
)
def test_a_lone_surrogate_is_a_400_json_error(server, path, body):
    url, _ = server
    refused = httpx.post(
        f"{url}{path}", content=body, headers={"Content-Type": "application/json"}, timeout=60
    )
    assert "lone surrogate" in _one_line_error(refused, 400)


def test_limits_that_could_never_be_met_and_the_key_rule_are_refused_at_start(trained, capsys):
    assert t5forge_in_process("serve", "--checkpoint", trained, "--max_queue", "4", "--max_items", "8") == 2  # fmt: skip
    assert t5forge_in_process("serve", "--checkpoint", trained, "--api_key", "short") == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("error: ") for line in lines), lines
    assert "max_queue 4 is below max_items 8" in lines[0]
    assert "api_key must be at least 8 characters" in lines[1]
    with pytest.raises(SystemExit):
        t5forge_in_process("serve", "--help")
    assert "at least 8 characters" in " ".join(capsys.readouterr().out.split())
