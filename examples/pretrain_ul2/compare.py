"""The README's comparison of examples/pretrain_ul2: pretraining curves, fine-tuned accuracy.

    .venv/bin/python examples/pretrain_ul2/compare.py \
        --pretrained ul2=runs/ul2/pretrain span_corruption=runs/ul2/span_corruption \
        --finetuned "ul2 [NLU]=runs/ul2/ft_ul2" span_corruption=runs/ul2/ft_sc \
        scratch=runs/ul2/ft_scratch --plot docs/images/pretrain_ul2.png

Reads each run's metrics.jsonl (t5forge.training.summaries), so it works on runs still in
progress. Prints two markdown tables and draws the pretraining losses beside the fine-tuning
runs' validation accuracy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from t5forge.training.summaries import curve_series, read_metrics


def _named_dirs(pairs: list[str]) -> dict[str, Path]:
    return {name: Path(path) for name, _, path in (p.partition("=") for p in pairs)}


def _series(model_dir: Path, split_prefix: str, metric: str) -> list[tuple[int, float]]:
    """(step, value) of the first split starting with split_prefix that logs `metric`.

    curve_series names an inference_eval metric '<task>: <metric>'.
    """
    for (split, name), points in sorted(curve_series(read_metrics(model_dir)).items()):
        if split.startswith(split_prefix) and (name == metric or name.endswith(f": {metric}")):
            return points
    return []


def pretraining_table(runs: dict[str, Path]) -> str:
    lines = ["| pretraining | step | train loss / target token | validation loss / target token |"]
    lines.append("|---|---:|---:|---:|")
    for name, model_dir in runs.items():
        train = dict(_series(model_dir, "train", "loss_per_nonpadding_target_token"))
        valid = dict(_series(model_dir, "training_eval/", "loss_per_nonpadding_target_token"))
        for step in sorted(valid):
            lines.append(
                f"| {name} | {step} | {train.get(step, float('nan')):.3f} | {valid[step]:.3f} |"
            )
    return "\n".join(lines)


def finetuning_table(runs: dict[str, Path]) -> str:
    accuracy = {name: dict(_series(d, "inference_eval/", "accuracy")) for name, d in runs.items()}
    steps = sorted({step for by_step in accuracy.values() for step in by_step})
    lines = ["| step | " + " | ".join(runs) + " |", "|---:|" + "---:|" * len(runs)]
    for step in steps:
        cells = [f"{accuracy[n][step]:.1f}" if step in accuracy[n] else "" for n in runs]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    best = [f"**{max(a.values()):.1f}**" if a else "" for a in accuracy.values()]
    lines.append("| best | " + " | ".join(best) + " |")
    return "\n".join(lines)


def plot(pretrained: dict[str, Path], finetuned: dict[str, Path], output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, model_dir in pretrained.items():
        for prefix, style in (("train", "-"), ("training_eval/", "o--")):
            points = _series(model_dir, prefix, "loss_per_nonpadding_target_token")
            label = f"{name} ({'train' if prefix == 'train' else 'validation'})"
            left.plot(*zip(*points), style, label=label)
    left.set(title="pretraining (each on its own objective)", xlabel="step")
    left.set_ylabel("loss per target token")
    for name, model_dir in finetuned.items():
        right.plot(*zip(*_series(model_dir, "inference_eval/", "accuracy")), "o-", label=name)
    right.set(title="fine-tuned on rotten_tomatoes", xlabel="step", ylabel="validation accuracy")
    for axes in (left, right):
        axes.grid(alpha=0.3)
        axes.legend()
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pretrained", nargs="+", default=[], metavar="NAME=MODEL_DIR")
    parser.add_argument("--finetuned", nargs="+", default=[], metavar="NAME=MODEL_DIR")
    parser.add_argument("--plot", type=Path, help="where to draw the two panels (PNG)")
    args = parser.parse_args()
    pretrained, finetuned = _named_dirs(args.pretrained), _named_dirs(args.finetuned)
    print(pretraining_table(pretrained), end="\n\n")
    print(finetuning_table(finetuned))
    if args.plot:
        plot(pretrained, finetuned, args.plot)
        print(f"\nwrote {args.plot}")


if __name__ == "__main__":
    main()
