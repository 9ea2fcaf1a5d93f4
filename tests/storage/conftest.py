"""A real S3 protocol server on loopback: moto's standalone server, one per test session.

Tests reach it as users reach any S3-compatible store: credentials and the endpoint come from
the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL), set for the test
and inherited by the commands it runs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

S3_ENV = {
    "AWS_ACCESS_KEY_ID": "t5forge-test",
    "AWS_SECRET_ACCESS_KEY": "t5forge-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_MAX_ATTEMPTS": "2",
    # Never ask a cloud metadata service for credentials: only loopback is ever contacted.
    "AWS_EC2_METADATA_DISABLED": "true",
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class MotoServer:
    """moto's S3 server on a free loopback port; `stop()` (or the end of a `with`) kills it."""

    def __init__(self, log_dir: Path):
        executable = Path(sys.executable).parent / "moto_server"
        if not executable.exists():
            pytest.skip("moto's server is not installed (it comes with the 'test' extra)")
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = (log_dir / f"moto-{port}.log").open("w")
        self.process = subprocess.Popen(
            [str(executable), "-H", "127.0.0.1", "-p", str(port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while not _answers(port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"moto_server did not start; see {self.log.name}")
            time.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """The endpoint URL of a moto S3 server on 127.0.0.1, stopped when the session ends."""
    with MotoServer(tmp_path_factory.mktemp("moto")) as server:
        yield server.url


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """This process and the commands it starts talk to the loopback server."""
    for name, value in {**S3_ENV, "AWS_ENDPOINT_URL": s3_server}.items():
        monkeypatch.setenv(name, value)
    return dict(os.environ)


@pytest.fixture
def bucket(s3_env) -> str:
    """A fresh, empty bucket's URL (`s3://name`)."""
    import boto3

    name = f"t5forge-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"]).create_bucket(Bucket=name)
    return f"s3://{name}"
