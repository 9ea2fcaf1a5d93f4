"""Prints the README's comparison table: validation BLEU of each fine-tuning run by step.

    .venv/bin/python examples/finetune_en_de/bleu_table.py \
        pretrained=runs/en_de/finetune scratch=runs/en_de/scratch

Reads each run's metrics.jsonl (the inference_eval records `t5forge train` writes), so it
works on finished runs and on runs still in progress.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def bleu_by_step(model_dir: Path) -> dict[int, float]:
    """{step: validation BLEU} from a run's metrics.jsonl (a rerun's record replaces the first)."""
    scores = {}
    for line in (Path(model_dir) / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["split"].startswith("inference_eval/") and "bleu" in record:
            scores[record["step"]] = record["bleu"]
    return scores


def markdown_table(runs: dict[str, Path]) -> str:
    """One row per evaluated step, one BLEU column per run."""
    scores = {label: bleu_by_step(path) for label, path in runs.items()}
    steps = sorted({step for by_step in scores.values() for step in by_step})
    lines = [
        "| step | " + " | ".join(f"BLEU ({label})" for label in runs) + " |",
        "|---:|" + "---:|" * len(runs),
    ]
    for step in steps:
        cells = [f"{scores[label][step]:.2f}" if step in scores[label] else "" for label in runs]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or any("=" not in arg for arg in argv):
        print("usage: bleu_table.py LABEL=MODEL_DIR [LABEL=MODEL_DIR ...]", file=sys.stderr)
        return 2
    print(markdown_table({label: Path(path) for label, path in (a.split("=", 1) for a in argv)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
