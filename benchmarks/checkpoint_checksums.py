"""What a checkpoint's checksums cost: sealing and verifying against the save itself.

Every save records the CRC-32 of each file it wrote (t5forge.checkpoints.integrity) and
every restore checks them first. This times, for the train state of T5 1.1 small with AdamW
(parameters plus two moments, float32), a synchronous Orbax save through the real Checkpointer
(checksums included), then `seal` and `verify` alone over the same files, as MB/s of checkpoint
data, through benchmarks/harness.py (sides in turns, --runs repetitions after a warm-up, the
load average checked). The ratios say how many times faster hashing is than the save it guards.

Results go to benchmarks/results/checkpoint_checksums.json.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402  (same directory)

from t5forge.checkpoints import (
    checkpointer,
    integrity,  # noqa: E402
)
from t5forge.models.model import build_model  # noqa: E402
from t5forge.models.presets import get_config  # noqa: E402
from t5forge.training import optimizers, partitioning  # noqa: E402
from t5forge.training.trainer import Trainer  # noqa: E402


def _state(preset: str):
    model = build_model(get_config(preset))
    trainer = Trainer(
        model, optimizers.adamw(1e-4), partitioning.PjitPartitioner(devices=jax.devices()[:1])
    )
    return trainer.init_state()


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--model", default="t5_1_1/small")
    parser.add_argument(
        "--runs", type=harness.repeats, default=harness.MIN_REPEATS, help="timed repetitions"
    )
    harness.add_arguments(parser, "checkpoint_checksums")
    args = parser.parse_args()
    bench = harness.Benchmark.from_args("checkpoint_checksums", args)
    state = _state(args.model)
    steps = itertools.count(1)
    with tempfile.TemporaryDirectory() as scratch:
        ckpt = checkpointer.Checkpointer(Path(scratch) / "run", period=1, async_save=False)
        first = next(steps)
        ckpt.save(first, state, force=True)
        sample = ckpt.step_dir(first)
        size = _bytes(sample)
        print(f"  one checkpoint: {size / 1e6:.1f} MB", flush=True)

        def save():
            ckpt.save(next(steps), state, force=True)

        bench.run(
            {
                "save (with checksums)": save,
                "seal (checksums alone)": lambda: integrity.seal(sample),
                "verify": lambda: integrity.verify(sample),
            },
            args.runs,
            size / 1e6,
            "MB/s",
        )
        ckpt.close()
    bench.compare("sealing vs the save", "seal (checksums alone)", "save (with checksums)")
    bench.compare("verifying vs the save", "verify", "save (with checksums)")
    bench.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
