"""benchmarks/gpu_session.py, issue 30's prepared device call, run whole at toy sizes on the CPU:
every phase must work the day a GPU is lent, with no device time spent finding out."""

import gzip
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import gpu_session  # noqa: E402

PHASES = [
    "device",
    "attention_bias_forms",
    "train_largest",
    "mfu_attention_xla",
    "mfu_h200_batch",
    "train_at_transformers_batch",
    "decode_vs_transformers",
    "decode_profile",
]


def _session(tmp_path, *flags):
    command = [
        sys.executable,
        str(BENCHMARKS / "gpu_session.py"),
        "--tiny",
        f"--out={tmp_path / 'out'}",
        f"--state_dir={tmp_path / 'state'}",
        *flags,
    ]
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    return summary["phases"], time.monotonic() - start


@pytest.mark.slow
def test_every_phase_runs_at_toy_sizes_and_a_second_call_resumes(tmp_path):
    phases, _ = _session(tmp_path, "--budget_s=900")
    assert {name: phase["status"] for name, phase in phases.items()} == dict.fromkeys(PHASES, "ok")

    out = tmp_path / "out"
    files = {path.name: path.stat().st_size for path in out.iterdir()}
    assert set(files) == {
        "summary.json",
        "session.log",
        "results.tar.gz",
        "decode_hlo.txt.gz",
        "trace.json.gz",
        "train_trace.json.gz",
    }
    assert all(size < gpu_session.LARGEST_FILE for size in files.values())

    profile = phases["decode_profile"]
    for part in ("generate", "stepwise"):  # the while loop and the server's host loop
        assert set(profile[part]) == {"step_ms", "fixed_s", "compiles_during_timed_calls"}
        assert set(profile[part]["compiles_during_timed_calls"].values()) == {0}
    assert profile["track_ms"], "the trace's tracks were summed"
    (largest,) = phases["train_largest"]["sides"].values()
    assert largest["track_ms"], "the largest batch's train step was traced"

    forms = phases["attention_bias_forms"]["forms"]
    assert set(forms) == {"encoder self", "decoder self", "cross"}
    assert forms["encoder self"]["xla batched bias"]["max_abs_position_grad"] > 0
    assert forms["cross"]["xla batched bias"]["max_abs_position_grad"] == 0  # no position bias

    ratios = phases["decode_vs_transformers"]["ratios"]
    assert [row.split(" decode")[0] for row in ratios] == [
        "t5_1_1/tiny greedy",
        "t5_1_1/tiny beam 4",
    ]
    assert all(ratio > 0 for ratio in ratios.values())
    at_peer_batch = phases["train_at_transformers_batch"]["sides"]
    assert {side["batch"] for side in at_peer_batch.values()} == {
        gpu_session.TINY.transformers_batch
    }
    assert len(at_peer_batch) == 2 and len(phases["train_at_transformers_batch"]["ratios"]) == 1
    bigger = phases["mfu_h200_batch"]["sides"]
    assert list(bigger) == ["t5_1_1/tiny train: t5forge"]
    assert bigger[next(iter(bigger))]["batch"] == gpu_session.TINY.h200_batch
    assert list(phases["mfu_attention_xla"]["sides"]) == [
        "t5_1_1/tiny train: t5forge (attention_implementation=xla)"
    ]
    assert not phases["mfu_attention_xla"]["ratios"], "MFU rows run t5forge alone"

    hlo = gzip.decompress((out / "decode_hlo.txt.gz").read_bytes()).decode()
    assert "HloModule jit__predict" in hlo and " while(" in hlo
    with tarfile.open(out / "results.tar.gz") as archive:
        names = set(archive.getnames())
    assert {"decode_profile.json", "logs/device.log", "logs/mfu_attention_xla.log"} <= names
    log = (out / "session.log").read_text()
    assert "jax device" in log
    # A phase cut off by the lease still says how far the build got.
    assert "state ready in" in log and "compiled in" in log

    # A second call on the same machine skips what the first finished.
    phases, seconds = _session(tmp_path, "--resume", "--budget_s=60")
    assert {phase["status"] for phase in phases.values()} == {"done earlier"}
    assert seconds < 30
    assert phases["decode_vs_transformers"]["ratios"] == ratios

    # A new session starts over; with no time left every phase says it was skipped.
    phases, _ = _session(tmp_path, "--budget_s=1")
    assert {phase["status"] for phase in phases.values()} == {"skipped: budget"}
    assert not (tmp_path / "state" / "decode_profile.json").exists()


def test_a_phase_past_its_time_is_killed_with_its_output_kept(tmp_path):
    phase = gpu_session.Phase(
        "sleeper",
        (sys.executable, "-c", "import time; print('started', flush=True); time.sleep(120)"),
        needs_s=0,
    )
    start = time.monotonic()
    status, code = gpu_session.run_phase(phase, 3, tmp_path / "sleeper.log", {})
    assert (status, code) == ("timed out", None)
    assert time.monotonic() - start < 30
    assert (tmp_path / "sleeper.log").read_text() == "started\n"


def test_phase_xla_flags_add_to_those_already_set():
    env = gpu_session._with({"XLA_FLAGS": "--a=1", "KEEP": "x"}, (("XLA_FLAGS", "--b=2"),))
    assert env == {"XLA_FLAGS": "--a=1 --b=2", "KEEP": "x"}
    assert gpu_session._with({}, (("T5FORGE_HOST_MEMORY", "system"),)) == {
        "T5FORGE_HOST_MEMORY": "system"
    }
