"""`t5forge train` as two `jax.distributed` processes on this machine, then a 1-process restart.

Each process has 4 virtual CPU devices and joins through a loopback coordinator, as hosts of
a cluster do; the two together train a tiny T5 on the bundled data and write one checkpoint.
A single process then resumes from that checkpoint and trains on. A SIGTERM sent to one of
two processes stops both at the same step, with that step saved.
"""

import json
import re
import signal
import socket
import subprocess
import time

import jax
import numpy as np
import pytest
from commands import xla_flags
from test_train_e2e import _losses

import t5forge
from t5forge.models.model import build_model

XLA_FLAGS = xla_flags(4)
FLAGS = [
    "--gin.DROPOUT_RATE=0.0",
    "--gin.EVAL_PERIOD=0",
    "--gin.train.stats_period=1",
    "--gin.train.infer_eval_dataset_cfg=None",
    "--gin.train.train_eval_dataset_cfg=None",
    "--gin.train.progress=False",
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _processes(tiny_runs, model_dir, steps, period, port, stdout):
    """Two processes of one run (`stdout(index)` takes each one's stdout and stderr)."""
    return [
        tiny_runs.popen(
            *tiny_runs.train_args(
                model_dir,
                steps,
                *FLAGS,
                f"--coordinator_address=127.0.0.1:{port}",
                "--process_count=2",
                f"--process_index={index}",
                period=period,
                quiet=False,
            ),
            env=tiny_runs.env(XLA_FLAGS=XLA_FLAGS),
            **stdout(index),
        )
        for index in range(2)
    ]


@pytest.fixture(scope="module")
def two_process_run(tiny_runs, tmp_path_factory):
    """Four steps on 2 processes x 4 devices (global batch 8), checkpoints at steps 2 and 4."""
    model_dir = tmp_path_factory.mktemp("two_processes") / "run"
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    processes = _processes(tiny_runs, model_dir, 4, 2, _free_port(), lambda _: pipes)
    outputs = [process.communicate(timeout=600) for process in processes]
    for process, (_, stderr) in zip(processes, outputs):
        assert process.returncode == 0, stderr[-3000:]
    return model_dir


@pytest.mark.slow
def test_two_processes_train_and_checkpoint_together(two_process_run):
    model_dir = two_process_run
    for name in ("config.gin", "model-info.txt", "spiece.model", "checkpoint_2", "checkpoint_4"):
        assert (model_dir / name).exists(), name
    assert {p.name for p in (model_dir / "checkpoint_4" / "state").glob("ocdbt.process_*")} == {
        "ocdbt.process_0",
        "ocdbt.process_1",
    }
    # only process 0 writes metrics: each step is logged once
    steps = [
        json.loads(line)["step"] for line in (model_dir / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == [1, 2, 3, 4]
    assert all(np.isfinite(loss) for loss in _losses(model_dir).values())
    # each process read its own shard, so each one's data position is recorded
    positions = json.loads((model_dir / "checkpoint_4" / "dataset" / "metadata").read_text())
    assert positions["process_count"] == 2 and len(positions["process_states"]) == 2


@pytest.mark.slow
def test_one_process_restart_continues_from_the_two_process_checkpoint(tiny_runs, two_process_run):
    model_dir = two_process_run
    restart = tiny_runs.train(
        model_dir, 6, *FLAGS, period=2, quiet=False, env=tiny_runs.env(XLA_FLAGS=XLA_FLAGS)
    )
    assert restart.returncode == 0, restart.stderr[-3000:]
    assert f"resumed from {model_dir / 'checkpoint_4'} (step 4)" in restart.stderr
    assert "was written by 2 process(es) and this run has 1" in restart.stderr
    assert sorted(_losses(model_dir)) == [1, 2, 3, 4, 5, 6]  # steps 1-4 were not redone
    assert (model_dir / "checkpoint_6").is_dir()

    # Restored, not re-initialised: step 6 is two updates away from step 4 and six from the
    # init (a re-initialised run would be two from the init and about as far from step 4).
    def flat(params):
        return np.concatenate([np.ravel(x) for x in jax.tree.leaves(params)])

    at_4 = t5forge.load(model_dir / "checkpoint_4")
    at_6 = flat(t5forge.load(model_dir / "checkpoint_6").params)
    init = flat(build_model(at_4.config).init_params(jax.random.PRNGKey(0)))
    assert np.linalg.norm(at_6 - flat(at_4.params)) < 0.75 * np.linalg.norm(at_6 - init)


@pytest.mark.slow
def test_sigterm_to_one_process_stops_both_at_the_same_step(tiny_runs, tmp_path):
    """A preemption notice reaches one host; both save the same step and exit cleanly."""
    model_dir = tmp_path / "two_processes_sigterm"
    logs = [open(tmp_path / f"process_{index}.log", "w+") for index in range(2)]
    processes = _processes(
        tiny_runs,
        model_dir,
        1000,
        1000,
        _free_port(),
        lambda index: {"stdout": logs[index], "stderr": subprocess.STDOUT},
    )
    metrics = model_dir / "metrics.jsonl"
    deadline = time.monotonic() + 480
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
        assert all(p.poll() is None for p in processes), "a process ended before step 3"
        assert time.monotonic() < deadline, "no step 3 within 8 minutes"
        time.sleep(0.2)
    processes[1].send_signal(signal.SIGTERM)
    for process in processes:
        process.wait(timeout=300)
    outputs = [log.seek(0) or log.read() for log in logs]
    for process, output in zip(processes, outputs):
        assert process.returncode == 143, output[-3000:]  # preempted and saved
    stopped = [re.search(r"SIGTERM: saving step (\d+) and exiting", output) for output in outputs]
    assert all(stopped), [output[-1000:] for output in outputs]
    steps = {int(match.group(1)) for match in stopped}
    assert len(steps) == 1, steps  # the same step on both processes
    step = steps.pop()
    assert 3 <= step < 1000
    assert {
        p.name for p in (model_dir / f"checkpoint_{step}" / "state").glob("ocdbt.process_*")
    } == {"ocdbt.process_0", "ocdbt.process_1"}
