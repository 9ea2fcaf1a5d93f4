"""examples/finetune_en_de, run as its README says, at tiny size.

English+German vocabulary (`t5forge vocab train`, two inputs) -> span-corruption pretraining on english_corpus -> en->de
fine-tuning from that checkpoint and from scratch -> the BLEU table of both runs.
"""

import pytest
from commands import python

pytestmark = pytest.mark.slow


def test_vocab_pretrain_then_finetune_vs_scratch_bleu_table(
    tmp_path, tiny_model_gin, shared_data, run_t5forge
):
    vocab = tmp_path / "spiece.model"
    made = run_t5forge(
        "vocab",
        "train",
        "--input",
        f"{shared_data}/english_corpus/train.jsonl.gz:text",
        "--input",
        f"{shared_data}/en_de_lohelp/train.jsonl.gz:de",
        "--byte_fallback",
        "--vocab_size=1000",
        "--input_sentence_size=20000",
        f"--output={vocab}",
        "--no_progress",
    )
    assert "1000 pieces + 100 extra ids" in made.stdout
    env = {"T5FORGE_VOCAB": str(vocab)}
    tiny = [
        f"--gin_file={tiny_model_gin}",
        "--gin.BATCH_SIZE=8",
        "--gin.TRAIN_STEPS=6",
        "--gin.CHECKPOINT_PERIOD=6",
        "--gin.train.stats_period=3",
    ]

    pretrain = tmp_path / "pretrain"
    run_t5forge(
        "train",
        "--gin_file=examples/finetune_en_de/pretrain.gin",
        *tiny,
        f"--gin.MODEL_DIR={pretrain}",
        "--gin.EVAL_PERIOD=0",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 64, 'targets': 16}",
        env=env,
    )
    assert (pretrain / "checkpoint_6").is_dir()

    finetune_flags = [
        "--gin_file=examples/finetune_en_de/finetune.gin",
        *tiny,
        "--gin.EVAL_PERIOD=6",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 24, 'targets': 16}",
    ]
    finetuned, scratch = tmp_path / "finetune", tmp_path / "scratch"
    from_pretrained = run_t5forge(
        "train",
        *finetune_flags,
        f"--gin.MODEL_DIR={finetuned}",
        f"--gin.INITIAL_CHECKPOINT_PATH={pretrain / 'checkpoint_6'}",
        env=env,
    )
    assert "parameters from the checkpoint, kept 0 freshly initialised" in from_pretrained.stderr
    run_t5forge(
        "train",
        *finetune_flags,
        f"--gin.MODEL_DIR={scratch}",
        "--gin.INITIAL_CHECKPOINT_PATH=None",
        env=env,
    )

    table = python(
        "examples/finetune_en_de/bleu_table.py",
        f"pretrained={finetuned}",
        f"scratch={scratch}",
        timeout=60,
        check=True,
    )
    header, rule, *rows = table.stdout.splitlines()
    assert header == "| step | BLEU (pretrained) | BLEU (scratch) |"
    assert [row.split("|")[1].strip() for row in rows] == ["0", "6"]
    for row in rows:
        bleu_cells = [float(cell) for cell in row.split("|")[2:4]]
        assert all(0.0 <= bleu <= 100.0 for bleu in bleu_cells), row
