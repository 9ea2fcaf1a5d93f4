"""The real `t5forge train|eval|infer` on T5X-style gin files, unchanged, from a stand-in
checkout on --gin_search_paths; the task name they bind comes from a SeqIO-style module."""

import json

import pytest
from commands import REPO, command_env, t5forge

CHECKOUT = REPO / "tests" / "cli" / "t5x_checkout"
EXAMPLES = "t5x/examples/t5/t5_1_1/examples"


def _run(command, *args, vocab):
    return t5forge(
        command,
        f"--gin_search_paths={CHECKOUT}",
        "--module_import=seqio_style_tasks",
        *args,
        env=command_env(T5FORGE_VOCAB=vocab, PYTHONPATH=REPO / "tests"),
        timeout=900,
        check=True,
    )


@pytest.mark.slow
def test_t5x_example_files_train_evaluate_and_infer(tmp_path, tiny_vocab):
    model_dir = tmp_path / "run"
    trained = _run(
        "train",
        f"--gin_file={EXAMPLES}/tiny_en_de_from_scratch.gin",
        f"--gin.MODEL_DIR={model_dir}",
        vocab=tiny_vocab,
    )
    assert "train_script.train.use_hardware_rng = True: accepted and ignored" in trained.stderr
    assert (model_dir / "checkpoint_4").is_dir() and (model_dir / "config.gin").is_file()
    records = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(r["split"] == "inference_eval/wmt_t2t_ende_v003" and "bleu" in r for r in records)

    _run(
        "eval",
        f"--gin_file={EXAMPLES}/tiny_en_de_eval.gin",
        f"--gin.CHECKPOINT_PATH={model_dir / 'checkpoint_4'}",
        f"--gin.EVAL_OUTPUT_DIR={tmp_path / 'eval'}",
        vocab=tiny_vocab,
    )
    assert list((tmp_path / "eval").rglob("*.jsonl"))

    inferred = _run(
        "infer",
        f"--gin_file={EXAMPLES}/tiny_en_de_infer.gin",
        f"--gin.CHECKPOINT_PATH={model_dir / 'checkpoint_4'}",
        f"--gin.INFER_OUTPUT_DIR={tmp_path / 'infer'}",
        vocab=tiny_vocab,
    )
    rows = (tmp_path / "infer" / "wmt_t2t_ende_v003-predict.jsonl").read_text().splitlines()
    assert len(rows) == 16, inferred.stdout
