"""`t5forge demo`: the main job on bundled data, end to end, in one command (`make demo`).

Trains a SentencePiece vocabulary on the bundled English->German slice, trains a small T5
from scratch on it (BLEU on the validation split at step 0 and at every eval), then
translates a few sentences and prints where everything is.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from t5forge.cli.commands import COMMANDS
from t5forge.tasks.builtin import BUNDLED_DATA_DIR

HELP = COMMANDS["demo"].summary
DATA = BUNDLED_DATA_DIR
EXAMPLES = ["Click the Save button.", "Choose Format - Cells.", "Deletes the selected rows."]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="t5forge demo",
        description=HELP,
        epilog="Gin flags (--gin_file=F, --gin.NAME=VALUE) are applied after the demo's config.",
    )
    parser.add_argument("--model_dir", default="runs/demo")
    parser.add_argument("--train_steps", type=int, default=None)
    from t5forge.gin_config import gin_flags

    args = parser.parse_args(gin_flags.split_gin_flags(argv).rest)
    model_dir = Path(args.model_dir).absolute()
    model_dir.mkdir(parents=True, exist_ok=True)

    vocab = model_dir / "demo_spiece.model"
    if not vocab.exists():
        from t5forge.data.vocab_trainer import file_texts, train_vocabulary

        source = str(DATA / "en_de_lohelp" / "train.jsonl.gz")
        texts = list(file_texts([source], "en")) + list(file_texts([source], "de"))
        print(train_vocabulary(texts, vocab, vocab_size=4000, extra_ids=100).format())
    os.environ["T5FORGE_VOCAB"] = str(vocab)
    os.environ["T5FORGE_DATA_DIR"] = str(DATA)

    from t5forge.cli import run_flags
    from t5forge.gin_config import gin_registry
    from t5forge.run.task_modules import import_task_modules

    bindings = [f"--gin.MODEL_DIR={model_dir}"]
    if args.train_steps:
        bindings.append(f"--gin.TRAIN_STEPS={args.train_steps}")
    import_task_modules([])
    gin_flags.parse_gin(
        gin_flags.split_gin_flags(["--gin_file=examples/demo_en_de.gin", *bindings, *argv])
    )
    gin_registry.train(summarize_config_fn=run_flags.write_gin_config)

    import t5forge

    model = t5forge.load(model_dir)
    inputs = [f"translate English to German: {text}" for text in EXAMPLES]
    for text, output in zip(EXAMPLES, model.generate(inputs, max_length=48)):
        print(f"  {text}  ->  {output}")
    history = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    bleu_by_step = [
        (r["step"], r["bleu"])
        for r in history
        if r["split"].startswith("inference_eval") and "bleu" in r
    ]
    print("\nvalidation BLEU: " + ", ".join(f"{b:.2f} at step {s}" for s, b in bleu_by_step))
    print(f"checkpoints and config.gin: {model_dir}")
    print(f"predictions: {model_dir / 'inference_eval'}")
    print(f"training curves: {model_dir / 'training_curves.png'}")
    print(f"TensorBoard: tensorboard --logdir {model_dir}")
    return 0
