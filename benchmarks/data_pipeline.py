"""Data pipeline speed: T5 span-corruption pretraining batches, t5forge vs SeqIO.

Measures examples/s and tokens/s of the pipeline a T5 pretraining run reads from:
tokenize -> span_corruption -> append_eos_after_trim at inputs 512 / targets 114, then the
encoder-decoder feature converter without packing and batches of 32, on the real
english_corpus (../shared/data). Tokens/s counts non-padding input and target tokens. Each side
builds its pipeline once, reads one batch (start-up is not throughput), then is timed by
benchmarks/harness.py: --runs repetitions of --num_batches batches after one warm-up
repetition; CPU-seconds are the side's interpreter's (t5forge's --worker_count worker processes
are not counted, hence 0 workers by default).

The vocabulary is a SentencePiece unigram model of --vocab_size pieces (default 8000, not
T5's 32000: training 32000 pieces here takes too long) trained by this script on the first
--vocab_documents documents, plus 100 sentinels; it is cached under --work_dir.

The peer is SeqIO on TensorFlow with the same vocabulary, data, steps and lengths, run after
t5forge in its own interpreter (which imports benchmarks/harness.py for the same timing).
SeqIO is never a dependency: set up a side environment (~3.2 GB) as REFERENCE.md describes
    python3 -m venv /tmp/seqio_env && /tmp/seqio_env/bin/pip install seqio tensorflow-cpu
    /tmp/seqio_env/bin/pip install --no-deps t5==0.9.4
    /tmp/seqio_env/bin/pip install babel gin-config sacrebleu rouge-score scikit-learn pandas nltk
and pass --seqio_python /tmp/seqio_env/bin/python (or run this script inside that
environment). Without it the comparison says that SeqIO was not measured, and prints the
number REFERENCE.md records for this machine as a reference, not a ratio.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))

import harness  # noqa: E402  (same directory)

from t5forge.data import (  # noqa: E402
    EncDecFeatureConverter,
    SentencePieceVocabulary,
    make_batch_iterator,
)
from t5forge.data.vocab_trainer import train_vocabulary  # noqa: E402
from t5forge.tasks.builtin import span_corruption_task  # noqa: E402

LENGTHS = {"inputs": 512, "targets": 114}
EXTRA_IDS = 100
SEQIO_REFERENCE_EXAMPLES_PER_SECOND = 2140  # REFERENCE.md "Peer numbers", this machine

SEQIO_MEASUREMENT = r"""
import functools, gzip, itertools, json, sys
import numpy as np, seqio, tensorflow as tf
from t5.data import preprocessors as t5_preprocessors

harness_dir, corpus, vocab_path, batch_size, num_batches, runs = sys.argv[1:7]
sys.path.insert(0, harness_dir)
import harness

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
ds = seqio.EncDecFeatureConverter(pack=False)(ds, lengths).batch(int(batch_size)).as_numpy_iterator()
next(ds)
tokens = []
def read():
    tokens.append(sum(int((b["encoder_input_tokens"] != 0).sum() + (b["decoder_target_tokens"] != 0).sum())
                      for b in itertools.islice(ds, int(num_batches))))
samples = harness.time_interleaved({"seqio": read}, int(runs))["seqio"]
print(json.dumps({"seconds": samples.seconds, "cpu_seconds": samples.cpu_seconds, "tokens": tokens}))
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


def count_tokens(batches, num_batches: int) -> int:
    """Non-padding input and target tokens of the next `num_batches` batches."""
    return sum(
        int(np.count_nonzero(batch["encoder_input_tokens"]))
        + int(np.count_nonzero(batch["decoder_target_tokens"]))
        for batch in itertools.islice(batches, num_batches)
    )


def measure_t5forge(data_dir: Path, vocab_path: Path, args) -> tuple[harness.Samples, list[int]]:
    """(timings, tokens read per call, warm-up first) of --num_batches batches per repetition."""
    vocabulary = SentencePieceVocabulary(vocab_path, extra_ids=EXTRA_IDS)
    task = span_corruption_task("bench_span_corruption", data_dir, "english_corpus", vocabulary)
    tokens = []
    with make_batch_iterator(
        task,
        "train",
        LENGTHS,
        args.batch_size,
        EncDecFeatureConverter(pack=False),
        seed=0,
        num_epochs=None,
        worker_count=args.worker_count,
    ) as batches:
        next(batches)  # start-up (file reading, workers) is not throughput
        samples = harness.time_interleaved(
            {"t5forge": lambda: tokens.append(count_tokens(batches, args.num_batches))}, args.runs
        )["t5forge"]
    return samples, tokens


def seqio_is_importable(python: str) -> bool:
    probe = subprocess.run([python, "-c", "import seqio, t5.data"], capture_output=True)
    return probe.returncode == 0


def measure_seqio(corpus: Path, vocab_path: Path, args) -> tuple[harness.Samples, list[int]]:
    """The SeqIO pipeline timed in `args.seqio_python` (an interpreter with seqio + t5)."""
    command = [
        args.seqio_python,
        "-c",
        SEQIO_MEASUREMENT,
        str(HERE),
        str(corpus),
        str(vocab_path),
        str(args.batch_size),
        str(args.num_batches),
        str(args.runs),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    return harness.Samples(measured["seconds"], measured["cpu_seconds"]), measured["tokens"]


def record(
    bench: harness.Benchmark,
    side: str,
    samples: harness.Samples,
    tokens: list[int],
    batch_size: int,
    num_batches: int,
) -> None:
    """Examples/s as the throughput; tokens/s over the timed repetitions (not the warm-up)."""
    timed_tokens = tokens[-len(samples.seconds) :]
    bench.record(
        side,
        samples,
        batch_size * num_batches,
        "examples/s",
        tokens_per_s=sum(timed_tokens) / sum(samples.seconds),
    )


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
    parser.add_argument(
        "--runs",
        type=harness.repeats,
        default=harness.MIN_REPEATS,
        help="timed repetitions of --num_batches batches per side",
    )
    parser.add_argument(
        "--seqio_python",
        default=sys.executable,
        help="interpreter of a side environment with seqio + t5 installed",
    )
    harness.add_arguments(parser, "data_pipeline")
    args = parser.parse_args()

    corpus = args.data_dir / "english_corpus" / "train.jsonl.gz"
    args.work_dir.mkdir(parents=True, exist_ok=True)
    vocab_path = build_vocabulary(corpus, args.work_dir, args.vocab_size, args.vocab_documents)
    bench = harness.Benchmark.from_args("data_pipeline", args)
    print(
        f"span corruption 512/114, no packing, batch {args.batch_size} x {args.num_batches} "
        f"batches, {args.vocab_size}-piece vocabulary, {args.worker_count} t5forge workers"
    )
    row = "span-corruption pipeline, 512/114"
    record(
        bench,
        "t5forge",
        *measure_t5forge(args.data_dir, vocab_path, args),
        args.batch_size,
        args.num_batches,
    )
    if seqio_is_importable(args.seqio_python):
        record(
            bench,
            "seqio",
            *measure_seqio(corpus, vocab_path, args),
            args.batch_size,
            args.num_batches,
        )
        bench.compare(row, "t5forge", "seqio")
    else:
        print(f"seqio is not importable with {args.seqio_python}: see --seqio_python")
        bench.peer_missing(
            row,
            "t5forge",
            "seqio",
            "not installed (a side environment, see benchmarks/data_pipeline.py), not measured; "
            f"REFERENCE.md records ~{SEQIO_REFERENCE_EXAMPLES_PER_SECOND:,} examples/s here",
        )
    bench.finish()


if __name__ == "__main__":
    main()
