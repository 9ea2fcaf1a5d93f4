"""Resuming a run: `t5forge train` rerun after a preemption, with and without the compile cache.

A preempted run is restarted with the same command, which restores the last checkpoint and
compiles its train step again before the first step: for T5 1.1 small on 2 cores that compile
is most of the restart. The commands keep compiled programs in JAX's persistent cache
(t5forge/compile_cache.py, on by default), so the restart reads the step back instead. This
times the whole restart command, interpreter start to exit, for one more step:
  - "compile cache": `--compile_cache DIR`, DIR filled by an untimed restart before;
  - "no compile cache": `--compile_cache ''`, the restart every run paid before the cache.
Each sample restarts from a fresh copy (hard links) of a run stopped at checkpoint_1, so every
restart does the same work: restore, compile or load, one step, save checkpoint_2. Training
data is the bundled en-de slice; the vocabulary a 2000-piece model trained on it (with its
100 sentinels, 2,100 of the model's 2,176 rows). Evaluation is off (a restart that evaluates
compiles, or loads, its decoding programs too).

    python benchmarks/resume_startup.py --model models/t5_1_1/small.gin

Results go to benchmarks/results/resume_startup.json ("shared CPU" above load 0.3).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import harness

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "t5forge" / "tasks" / "data"
TASK = "en_de_lohelp_translate"
CACHED, UNCACHED = "compile cache", "no compile cache"


def train_command(model_gin: str, model_dir: Path, steps: int, cache: str, args) -> list[str]:
    """`t5forge train` of `model_gin` on the bundled en-de slice, no evaluation."""
    length = args.length
    return [
        sys.executable, "-m", "t5forge", "train",
        f"--gin_file={model_gin}", "--gin_file=runs/finetune.gin",
        f"--gin.MODEL_DIR={model_dir}", f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
        f"--gin.TASK_FEATURE_LENGTHS={{'inputs': {length}, 'targets': {length}}}",
        f"--gin.TRAIN_STEPS={steps}", f"--gin.BATCH_SIZE={args.batch}",
        "--gin.INITIAL_CHECKPOINT_PATH=None", "--gin.T5Config.vocab_size=2176",
        "--gin.CHECKPOINT_PERIOD=1", "--gin.EVAL_PERIOD=0",
        "--gin.train.infer_eval_dataset_cfg=None", "--gin.train.train_eval_dataset_cfg=None",
        f"--compile_cache={cache}",
    ]  # fmt: skip


def vocabulary(path: Path) -> Path:
    """A 2000-piece SentencePiece model of the bundled en-de slice (both languages)."""
    from t5forge.data.vocab_trainer import train_vocabulary

    with gzip.open(DATA / "en_de_lohelp" / "train.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    texts = [row[side] for row in rows for side in ("en", "de")]
    train_vocabulary(texts, path, 2000, extra_ids=0, progress=False)
    return path


def restart(work: Path, stopped: Path, command_of, cache: str, timeout: int):
    """A call that restarts a copy of the stopped run for one step; returns the steps done."""
    copy = work / "restart"

    def run() -> int:
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(stopped, copy, copy_function=os.link)
        done = subprocess.run(
            command_of(copy, 2, cache), capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0 or "resumed from" not in done.stderr:
            raise RuntimeError(f"the restart failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return 1

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/t5_1_1/small.gin")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per command")
    parser.add_argument("--runs", type=harness.repeats, default=harness.MIN_REPEATS)
    harness.add_arguments(parser, "resume_startup")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="t5forge-bench-resume-") as tmp:
        work = Path(tmp)
        os.environ.update(
            T5FORGE_VOCAB=str(vocabulary(work / "spiece.model")),
            T5FORGE_DATA_DIR=str(DATA),
            JAX_PLATFORMS="cpu",
        )

        def command_of(model_dir: Path, steps: int, cache: str) -> list[str]:
            return train_command(args.model, model_dir, steps, cache, args)

        stopped = work / "stopped"
        subprocess.run(command_of(stopped, 1, ""), check=True, capture_output=True)
        bench = harness.Benchmark.from_args("resume_startup", args)
        calls = {
            CACHED: restart(work, stopped, command_of, str(work / "cache"), args.timeout),
            UNCACHED: restart(work, stopped, command_of, "", args.timeout),
        }
        # The warm-up restart of CACHED fills its cache, as the preempted run itself would.
        samples = harness.time_interleaved(calls, args.runs, cpu_clock=harness.children_cpu_seconds)
    for name, runs in samples.items():
        bench.record(name, runs, runs.output, "restarts/s")
    bench.compare(
        f"restart of {args.model.removeprefix('models/').removesuffix('.gin')} train, "
        f"batch {args.batch}, "
        f"{args.length}/{args.length}, one step",
        CACHED,
        UNCACHED,
        metric="latency",
        peer_label=UNCACHED,
    )
    bench.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
