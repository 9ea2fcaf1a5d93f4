"""Data pipeline speed: T5 span-corruption pretraining batches, t5forge vs SeqIO.

Measures examples/s and tokens/s of the pipeline a T5 pretraining run reads from:
tokenize -> span_corruption -> append_eos_after_trim at inputs 512 / targets 114, then the
encoder-decoder feature converter without packing and batches of 32, on the real
english_corpus (../shared/data). Tokens/s counts non-padding input and target tokens.
Examples per CPU-second (all threads of this process) is printed too: on a shared machine
wall-clock rates mostly measure the neighbours.

The vocabulary is a SentencePiece unigram model of --vocab_size pieces (default 8000, not
T5's 32000: training 32000 pieces here takes too long) trained by this script on the first
--vocab_documents documents, plus 100 sentinels; it is cached under --work_dir.

The peer is SeqIO on TensorFlow with the same vocabulary, data, steps and lengths, run in
its own interpreter. SeqIO is never a dependency: set up a side environment (~3.2 GB) as
REFERENCE.md describes
    python3 -m venv /tmp/seqio_env && /tmp/seqio_env/bin/pip install seqio tensorflow-cpu
    /tmp/seqio_env/bin/pip install --no-deps t5==0.9.4
    /tmp/seqio_env/bin/pip install babel gin-config sacrebleu rouge-score scikit-learn pandas nltk
and pass --seqio_python /tmp/seqio_env/bin/python (or run this script inside that
environment). Without it the script prints the SeqIO number recorded in REFERENCE.md for
this machine, clearly labelled as a reference value and not a same-run measurement.

Each of --runs rounds measures t5forge and then SeqIO, so both see the same neighbours;
the ratio is of the medians.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from t5forge.data.feature_converters import EncDecFeatureConverter  # noqa: E402
from t5forge.data.pipeline import make_batch_iterator  # noqa: E402
from t5forge.data.vocab_trainer import train_vocabulary  # noqa: E402
from t5forge.data.vocabularies import SentencePieceVocabulary  # noqa: E402
from t5forge.tasks.builtin import span_corruption_task  # noqa: E402

LENGTHS = {"inputs": 512, "targets": 114}
EXTRA_IDS = 100
SEQIO_REFERENCE_EXAMPLES_PER_SECOND = 2140  # REFERENCE.md "Peer numbers", this machine

SEQIO_MEASUREMENT = r"""
import functools, gzip, json, sys, time
import numpy as np, seqio, tensorflow as tf
from t5.data import preprocessors as t5_preprocessors

corpus, vocab_path, batch_size, num_batches = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with gzip.open(corpus, "rt", encoding="utf-8") as f:
    texts = [json.loads(line)["text"] for line in f]
vocabulary = seqio.SentencePieceVocabulary(vocab_path, extra_ids=100)
source = seqio.FunctionDataSource(
    lambda split, shuffle_files, seed=None: tf.data.Dataset.from_tensor_slices({"text": texts}),
    splits=["train"])
task = seqio.Task(
    "bench_span_corruption", source=source,
    preprocessors=[
        functools.partial(t5_preprocessors.rekey, key_map={"inputs": None, "targets": "text"}),
        seqio.preprocessors.tokenize, t5_preprocessors.span_corruption,
        seqio.preprocessors.append_eos_after_trim],
    output_features={"inputs": seqio.Feature(vocabulary), "targets": seqio.Feature(vocabulary)})
lengths = {"inputs": 512, "targets": 114}
ds = task.get_dataset(lengths, split="train", shuffle=True, seed=0, num_epochs=None)
ds = seqio.EncDecFeatureConverter(pack=False)(ds, lengths).batch(batch_size).as_numpy_iterator()
next(ds)
start, cpu_start, tokens = time.perf_counter(), time.process_time(), 0
for batch in (next(ds) for _ in range(num_batches)):
    tokens += int((batch["encoder_input_tokens"] != 0).sum() + (batch["decoder_target_tokens"] != 0).sum())
seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
print(json.dumps({"examples_per_second": batch_size * num_batches / seconds,
                  "tokens_per_second": tokens / seconds,
                  "examples_per_cpu_second": batch_size * num_batches / cpu_seconds}))
"""


def build_vocabulary(corpus: Path, work_dir: Path, vocab_size: int, documents: int) -> Path:
    """Trains (once) the benchmark's SentencePiece model on the first documents."""
    path = work_dir / f"english_{vocab_size}_{documents}.model"
    if path.exists():
        return path
    with gzip.open(corpus, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in itertools.islice(f, documents)]
    started = time.perf_counter()
    train_vocabulary(texts, path, vocab_size, extra_ids=EXTRA_IDS, progress=False)
    print(
        f"trained a {vocab_size}-piece vocabulary on {documents} documents "
        f"in {time.perf_counter() - started:.0f} s -> {path}"
    )
    return path


def measure_t5forge(
    data_dir: Path, vocab_path: Path, batch_size: int, num_batches: int, worker_count: int
) -> dict[str, float]:
    vocabulary = SentencePieceVocabulary(vocab_path, extra_ids=EXTRA_IDS)
    task = span_corruption_task("bench_span_corruption", data_dir, "english_corpus", vocabulary)
    converter = EncDecFeatureConverter(pack=False)
    with make_batch_iterator(
        task,
        "train",
        LENGTHS,
        batch_size,
        converter,
        seed=0,
        num_epochs=None,
        worker_count=worker_count,
    ) as batches:
        next(batches)  # start-up (file reading, workers) is not throughput
        started, cpu_started, tokens = time.perf_counter(), time.process_time(), 0
        for batch in itertools.islice(batches, num_batches):
            tokens += int(np.count_nonzero(batch["encoder_input_tokens"]))
            tokens += int(np.count_nonzero(batch["decoder_target_tokens"]))
        seconds = time.perf_counter() - started
        cpu_seconds = time.process_time() - cpu_started
    return {
        "examples_per_second": batch_size * num_batches / seconds,
        "tokens_per_second": tokens / seconds,
        "examples_per_cpu_second": batch_size * num_batches / cpu_seconds,
    }


def seqio_is_importable(python: str) -> bool:
    probe = subprocess.run([python, "-c", "import seqio, t5.data"], capture_output=True)
    return probe.returncode == 0


def measure_seqio(
    python: str, corpus: Path, vocab_path: Path, batch_size: int, num_batches: int
) -> dict[str, float]:
    """Runs the SeqIO pipeline in `python` (an interpreter with seqio + t5 installed)."""
    result = subprocess.run(
        [
            python,
            "-c",
            SEQIO_MEASUREMENT,
            str(corpus),
            str(vocab_path),
            str(batch_size),
            str(num_batches),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def describe(name: str, rates: dict[str, float]) -> str:
    return (
        f"{name}: {rates['examples_per_second']:,.0f} examples/s, "
        f"{rates['tokens_per_second']:,.0f} tokens/s, "
        f"{rates['examples_per_cpu_second']:,.0f} examples per CPU-second"
    )


def median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument(
        "--work_dir", type=Path, default=Path(tempfile.gettempdir()) / "t5forge_bench"
    )
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--vocab_documents", type=int, default=2000)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--num_batches", type=int, default=100)
    parser.add_argument("--worker_count", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3, help="rounds; medians are compared")
    parser.add_argument(
        "--seqio_python",
        default=sys.executable,
        help="interpreter of a side environment with seqio + t5 installed",
    )
    args = parser.parse_args()

    corpus = args.data_dir / "english_corpus" / "train.jsonl.gz"
    args.work_dir.mkdir(parents=True, exist_ok=True)
    vocab_path = build_vocabulary(corpus, args.work_dir, args.vocab_size, args.vocab_documents)
    print(
        f"span corruption 512/114, no packing, batch {args.batch_size} x {args.num_batches} "
        f"batches, {args.vocab_size}-piece vocabulary, {args.worker_count} t5forge workers, "
        f"{os.cpu_count()} cores"
    )
    with_seqio = seqio_is_importable(args.seqio_python)
    ours_runs, peer_runs = [], []
    for run in range(1, args.runs + 1):
        print(f"run {run} (load average {os.getloadavg()[0]:.1f})")
        ours_runs.append(
            measure_t5forge(
                args.data_dir, vocab_path, args.batch_size, args.num_batches, args.worker_count
            )
        )
        print("  " + describe("t5forge", ours_runs[-1]))
        if with_seqio:
            peer_runs.append(
                measure_seqio(
                    args.seqio_python, corpus, vocab_path, args.batch_size, args.num_batches
                )
            )
            print("  " + describe("seqio", peer_runs[-1]))

    ours = median(ours_runs)
    print(f"median of {args.runs}: " + describe("t5forge", ours))
    if with_seqio:
        peer = median(peer_runs)
        print(f"median of {args.runs}: " + describe("seqio, same runs", peer))
        wall = ours["examples_per_second"] / peer["examples_per_second"]
        cpu = ours["examples_per_cpu_second"] / peer["examples_per_cpu_second"]
        print(
            f"ratio t5forge / seqio: {wall:.2f}x examples/s, {cpu:.2f}x examples per "
            "CPU-second (seqio measured in the same runs)"
        )
    else:
        peer_rate = SEQIO_REFERENCE_EXAMPLES_PER_SECOND
        label = "REFERENCE value from REFERENCE.md, not measured in this run"
        print(
            f"seqio: not importable with {args.seqio_python} (see --seqio_python); "
            f"{label}: ~{peer_rate:,} examples/s"
        )
        print(f"ratio t5forge / seqio: {ours['examples_per_second'] / peer_rate:.2f}x ({label})")


if __name__ == "__main__":
    main()
