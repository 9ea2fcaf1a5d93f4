"""A MODEL_DIR on a bucket that cannot be written: one error line, exit 2, nothing half-copied
taken for a checkpoint."""

from __future__ import annotations

import time
import uuid

import boto3
import pytest
from commands import REPO, command_env, t5forge, t5forge_popen

from .conftest import S3_ENV, MotoServer
from .test_remote_model_dir import _train_args


def _copied_checkpoints(client) -> list[str]:
    listing = client.list_objects_v2(Bucket="t5forge-outage", Prefix="run/checkpoint_")
    return [o["Key"] for o in listing.get("Contents", []) if o["Key"].endswith("checksums.json")]


def _error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr[-3000:]
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize("case", ["no bucket", "no credentials"])
def test_a_model_dir_that_cannot_be_reached_is_one_line(
    case, s3_env, tiny_vocab, tiny_model_gin, tmp_path
):
    env = command_env(  # and s3_env's
        T5FORGE_VOCAB=tiny_vocab,
        T5FORGE_STAGING_DIR=tmp_path / "staging",
        T5FORGE_DATA_DIR=REPO / "t5forge" / "tasks" / "data",
    )
    if case == "no credentials":
        del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    run = f"s3://t5forge-missing-{uuid.uuid4().hex[:8]}/run"
    result = t5forge(*_train_args(run, tiny_model_gin), env=env, timeout=300)
    (line,) = _error_lines(result.stderr)
    assert result.returncode == 2, result.stderr[-3000:]
    expected = "bucket does not exist" if case == "no bucket" else "no credentials"
    assert run in line and expected in line, line


@pytest.mark.slow
def test_the_store_going_away_mid_run_is_one_line_naming_the_last_complete_checkpoint(
    s3_env, tiny_vocab, tiny_model_gin, tmp_path
):
    with MotoServer(tmp_path) as server:
        boto3.client("s3", endpoint_url=server.url).create_bucket(Bucket="t5forge-outage")
        env = command_env(
            AWS_ENDPOINT_URL=server.url,
            T5FORGE_VOCAB=tiny_vocab,
            T5FORGE_STAGING_DIR=tmp_path / "staging",
            T5FORGE_DATA_DIR=REPO / "t5forge" / "tasks" / "data",
            **S3_ENV,
        )
        run = "s3://t5forge-outage/run"
        log = tmp_path / "run.log"
        with log.open("w") as stderr:
            process = t5forge_popen(*_train_args(run, tiny_model_gin), env=env, stderr=stderr)
        client = boto3.client("s3", endpoint_url=server.url)
        deadline = time.time() + 300
        while not _copied_checkpoints(client) and time.time() < deadline:
            assert process.poll() is None, log.read_text()[-3000:]
            time.sleep(0.05)
    # The server is gone: the next copy fails.
    assert process.wait(timeout=300) == 2, log.read_text()[-3000:]
    (line,) = _error_lines(log.read_text())
    assert f"could not copy the run to {run}" in line and "the object store did not answer" in line
    assert "the newest complete checkpoint there is checkpoint_" in line, line
