"""Scoring speed as the work grows: t5forge vs Hugging Face PyTorch, by batch and input length.

T5 1.1 small with random weights (float32) scores (input, target) pairs: teacher-forced logits
and each row's sum of target-token log-likelihoods, what eval and `t5forge infer` score do.
t5forge runs the model's jitted `score_batch` on a `Model.score_features` batch, as those
paths do (`Model.score` would pad the 114 targets to its 128 bucket); transformers runs
T5ForConditionalGeneration under torch.no_grad on the very same weights
(benchmarks/same_weights.py), then log_softmax and the same sum. Each side runs in a process of
its own (benchmarks/isolated.py; transformers scored ~7% slower beside JAX in one process).
Token ids are drawn from [3, vocab), so no row holds padding on either side, and each point's scores must agree to SCORE_RTOL or nothing
is reported. Two series: --batches at --input_length, and --lengths at --batch (the point they
share is measured once). Timing is benchmarks/harness.py's (median of --runs after a warm-up
that includes t5forge's compilation); tokens/s counts inputs + targets of every row. Results go
to benchmarks/results/scaling.json (one README row per point through `benchmarks/report.py`)
and the plot to docs/images/scaling.png.

A quick check that it runs end to end (writes nothing under the repository):

    python benchmarks/scaling.py --batches 1 2 --lengths 128 --batch 2 --input_length 128 \
        --settle_seconds 0 --results /tmp/scaling.json --plot /tmp/scaling.png
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import harness  # noqa: E402  (same directory)
import same_weights  # noqa: E402  (same directory)
from isolated import IsolatedSide  # noqa: E402  (same directory)

PLOT = ROOT / "docs" / "images" / "scaling.png"
SCORE_RTOL = 1e-3
CONFIG = "t5_1_1/small"
SIDES = ("t5forge", "transformers")


def _point(batch: int, input_length: int, target_length: int) -> str:
    """A point's name: its sides are '<point>: t5forge' and '<point>: transformers'."""
    return f"batch {batch}, {input_length}/{target_length}"


def _points(args) -> list[tuple[int, int]]:
    """(batch, input length) of both series in order, the shared point once."""
    points = [(batch, args.input_length) for batch in args.batches]
    points += [(args.batch, length) for length in args.lengths]
    return list(dict.fromkeys(points))


# Factories of the two sides, each called in its own worker (benchmarks/isolated.py). Their call
# scores int [B, L] inputs and [B, T] targets: float32 [B] sums of target log-likelihoods.


def forge_side(params_path: str):
    forge = same_weights.load_forge(params_path, CONFIG)

    def run(inputs, targets):
        rows, length, target_length = len(inputs), inputs.shape[1], targets.shape[1]
        lengths = {"inputs": length, "targets": target_length}
        features = forge.score_features(inputs, targets, lengths, rows)
        return np.asarray(forge.t5x_model.score_batch(forge.params, features), np.float32)

    return run


def hf_side(hf_dir: str):
    import torch

    model = same_weights.load_hf(hf_dir)

    def run(inputs, targets):
        shifted = np.pad(targets, ((0, 0), (1, 0)))[:, :-1]
        encoder_inputs = torch.from_numpy(inputs.astype(np.int64))
        with torch.no_grad():
            logits = model(
                input_ids=encoder_inputs,
                attention_mask=torch.ones_like(encoder_inputs),
                decoder_input_ids=torch.from_numpy(shifted.astype(np.int64)),
                use_cache=False,
            ).logits
            log_probs = torch.log_softmax(logits, dim=-1)
            picked = log_probs.gather(-1, torch.from_numpy(targets.astype(np.int64))[..., None])
            return picked[..., 0].sum(-1).numpy()

    return run


def _start_sides(config, params, work_dir: Path) -> dict[str, IsolatedSide]:
    params_path, hf_dir = same_weights.write_params(params, work_dir), work_dir / "hf"
    same_weights.hf_model(config, params).save_pretrained(hf_dir)
    return {
        "t5forge": IsolatedSide("scaling:forge_side", params_path=str(params_path)),
        "transformers": IsolatedSide("scaling:hf_side", hf_dir=str(hf_dir)),
    }


def _plot(result: dict, path: Path) -> None:
    """Tokens/s of both sides by batch and by input length, each t5forge point marked with its
    ratio; the title names the machine, commit and load average of `result` (a results file)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings, sides = result["settings"], result["sides"]
    target = settings["target_length"]
    series = (
        ("batch", [(b, settings["input_length"]) for b in settings["batches"]], 0),
        ("input length", [(settings["batch"], n) for n in settings["lengths"]], 1),
    )
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for axis, (label, points, varied) in zip(axes, series):
        xs = [point[varied] for point in points]
        names = [_point(batch, length, target) for batch, length in points]
        for color, side in zip(("C0", "C1"), SIDES):
            ys = [sides[f"{name}: {side}"]["throughput"] for name in names]
            axis.plot(xs, ys, "o-", color=color, label=side)
        top = max(sides[f"{name}: {side}"]["throughput"] for name in names for side in SIDES)
        for x, name in zip(xs, names):
            ours, peer = sides[f"{name}: t5forge"], sides[f"{name}: transformers"]
            axis.annotate(
                f"{harness.ratio(ours, peer, 'throughput'):.2f}x",
                (x, ours["throughput"]),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=7,
            )
        fixed = f"input length {points[0][1]}" if varied == 0 else f"batch {points[0][0]}"
        axis.set_xscale("log", base=2)
        axis.set_xticks(xs, [str(x) for x in xs])
        axis.set_xlabel(label)
        axis.set_ylabel("tokens/s (inputs + targets)")
        axis.set_ylim(0, 1.15 * top)  # room for the ratios
        axis.set_title(f"by {label} ({fixed}, {target} target tokens)", fontsize=9)
        axis.legend(fontsize=7)
    machine = result["machine"]
    dirty = " + uncommitted changes" if result["dirty"] else ""
    shared = f", {harness.SHARED_LABEL}" if result["shared_cpu"] else ""
    figure.suptitle(
        f"T5 1.1 small fp32 scoring, t5forge vs transformers (ratio above t5forge's points)\n"
        f"{machine['cpu']} ({machine['cores']} cores), commit {result['commit']}{dirty}, "
        f"1-minute load average {result['load_before']:.2f} before / "
        f"{result['load_after']:.2f} after{shared}",
        fontsize=9,
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--input_length", type=int, default=512, help="of the batch series")
    parser.add_argument("--lengths", nargs="+", type=int, default=[128, 256, 512, 1024])
    parser.add_argument("--batch", type=int, default=8, help="of the input length series")
    parser.add_argument("--target_length", type=int, default=114)
    parser.add_argument("--runs", type=harness.repeats, default=harness.MIN_REPEATS)
    parser.add_argument("--plot", type=Path, default=PLOT, help="where the plot goes")
    harness.add_arguments(parser, "scaling")
    args = parser.parse_args()

    import jax

    from t5forge.models.model import build_model
    from t5forge.models.presets import get_config

    bench = harness.Benchmark.from_args("scaling", args)
    config = get_config(CONFIG, dtype="float32")
    params = jax.device_get(build_model(config).init_params(jax.random.PRNGKey(0)))
    with tempfile.TemporaryDirectory(prefix="t5forge-bench-scaling-") as scratch:
        sides = _start_sides(config, params, Path(scratch))
        try:
            status = _measure(bench, args, sides, config.vocab_size)
        finally:
            for side in sides.values():
                side.close()
    if status:
        return status
    results = bench.finish()
    _plot(json.loads(results.read_text()), args.plot)
    print(f"wrote {args.plot}")
    return 0


def _measure(bench, args, sides: dict[str, IsolatedSide], vocab_size: int) -> int:
    print(
        f"T5 1.1 small fp32 scoring, {args.target_length} target tokens, each side in its own "
        "process",
        flush=True,
    )
    rng = np.random.default_rng(0)
    for batch, length in _points(args):
        point = _point(batch, length, args.target_length)
        inputs = rng.integers(3, vocab_size, (batch, length), np.int32)
        targets = rng.integers(3, vocab_size, (batch, args.target_length), np.int32)
        print(point, flush=True)
        outputs = bench.run(
            {
                f"{point}: {name}": side.bind(inputs=inputs, targets=targets)
                for name, side in sides.items()
            },
            args.runs,
            work=batch * (length + args.target_length),
            unit="tokens/s",
        )
        ours, peer = (outputs[f"{point}: {side}"] for side in SIDES)
        worst = float(np.max(np.abs(ours - peer) / np.abs(peer)))
        if not worst <= SCORE_RTOL:
            print(
                f"error: {point}: t5forge's and transformers' scores differ by up to "
                f"{worst:.1e} relative (allowed {SCORE_RTOL:.0e}); not comparable, nothing "
                "reported",
                file=sys.stderr,
            )
            return 1
        print(f"  scores agree to {worst:.1e} relative", flush=True)
        bench.compare(
            f"scoring, {point}, fp32",
            f"{point}: t5forge",
            f"{point}: transformers",
            peer_label="transformers",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
