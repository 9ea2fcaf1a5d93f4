"""cache-tasks throughput: the local writer against Apache Beam's DirectRunner, 1 and 2 workers.

Caches the cached steps of the span-corruption recipe (rekey -> tokenize, as the built-in
english_span_corruption task) over --documents documents: english_corpus's train split
repeated until it has that many (200k by default). Each configuration runs in its own
interpreter (its start-up included, as a user's command would), the configurations taking
turns for --runs repetitions after a warm-up (benchmarks/harness.py), and is reported as
examples/s (wall clock) and CPU-seconds (the interpreter and the worker processes it waited
for). DirectRunner's 2 workers are processes (`--direct_running_mode=multi_processing`), the
mode that can use two cores. Started above a load average of 0.3, the run is labelled
"shared CPU": take publishable numbers on an idle machine only.

Results go to benchmarks/results/cache_tasks.json.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import harness

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("T5FORGE_SHARED_DATA", REPO.parent / "shared" / "data"))
LOCAL = "local writer"
CONFIGURATIONS = {
    LOCAL: [],
    "DirectRunner, 1 worker": ["--runner=DirectRunner", "--direct_num_workers=1"],
    "DirectRunner, 2 workers": [
        "--runner=DirectRunner",
        "--direct_num_workers=2",
        "--direct_running_mode=multi_processing",
    ],
}
TASK_MODULE = """
import os
from t5forge.data import preprocessors as pp
from t5forge.data import JsonLinesSource
from t5forge.data import Feature, Task
from t5forge.data import TaskRegistry
from t5forge.data import EnvironmentSentencePieceVocabulary

vocabulary = EnvironmentSentencePieceVocabulary(extra_ids=100)
TaskRegistry.add(Task(
    "bench_corpus",
    JsonLinesSource({"train": os.environ["BENCH_CORPUS"]}),
    [pp.rekey.bind(key_map={"inputs": None, "targets": "text"}), pp.tokenize,
     pp.CacheDatasetPlaceholder(), pp.span_corruption, pp.append_eos_after_trim],
    {"inputs": Feature(vocabulary), "targets": Feature(vocabulary)},
))
"""


def write_corpus(path: Path, documents: int) -> None:
    """english_corpus's train split, repeated up to `documents` lines (plain JSONL)."""
    with gzip.open(SHARED_DATA / "english_corpus" / "train.jsonl.gz", "rt") as f:
        lines = [line for line in f if line.strip()]
    with open(path, "w") as out:
        out.writelines(itertools.islice(itertools.cycle(lines), documents))


def vocabulary(args, work_dir: Path) -> Path:
    """--vocab, else $T5FORGE_VOCAB, else an 8000-piece model trained on 1000 documents."""
    if args.vocab or os.environ.get("T5FORGE_VOCAB"):
        return Path(args.vocab or os.environ["T5FORGE_VOCAB"])
    from t5forge.data.vocab_trainer import train_vocabulary

    path = work_dir / "english_8000.model"
    with open(work_dir / "corpus.jsonl") as f:
        texts = [json.loads(line)["text"] for line in itertools.islice(f, 1000)]
    train_vocabulary(texts, path, 8000, extra_ids=100, progress=False)
    return path


def cache_command(beam_flags: list[str], work_dir: Path, timeout: int):
    """A call running `t5forge cache-tasks` once; it returns the number of examples cached."""
    output = work_dir / "cache"
    command = [
        sys.executable, "-m", "t5forge", "cache-tasks", "--tasks=bench_corpus",
        f"--output_cache_dir={output}", "--module_import=bench_task", "--no_progress",
        *beam_flags,
    ]  # fmt: skip

    def run() -> int:
        shutil.rmtree(output, ignore_errors=True)
        subprocess.run(command, check=True, timeout=timeout, cwd=work_dir, capture_output=True)
        return json.loads((output / "bench_corpus" / "stats.train.json").read_text())["examples"]

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=200_000)
    parser.add_argument("--vocab", help="SentencePiece model (default: $T5FORGE_VOCAB or train)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per run")
    parser.add_argument(
        "--runs",
        type=harness.repeats,
        default=harness.MIN_REPEATS,
        help="timed runs of each configuration",
    )
    harness.add_arguments(parser, "cache_tasks")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="t5forge-bench-cache-") as tmp:
        work_dir = Path(tmp)
        write_corpus(work_dir / "corpus.jsonl", args.documents)
        (work_dir / "bench_task.py").write_text(TASK_MODULE)
        os.environ.update(
            BENCH_CORPUS=str(work_dir / "corpus.jsonl"),
            T5FORGE_VOCAB=str(vocabulary(args, work_dir)),
            PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        )
        bench = harness.Benchmark.from_args("cache_tasks", args)
        print(f"{args.documents} documents", flush=True)
        calls = {
            name: cache_command(flags, work_dir, args.timeout)
            for name, flags in CONFIGURATIONS.items()
        }
        samples = harness.time_interleaved(calls, args.runs, cpu_clock=harness.children_cpu_seconds)
    for name, runs in samples.items():
        bench.record(name, runs, runs.output, "examples/s", examples=runs.output)
    for name in CONFIGURATIONS:
        if name != LOCAL:
            bench.compare(f"cache-tasks, {args.documents} documents", LOCAL, name)
    bench.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
