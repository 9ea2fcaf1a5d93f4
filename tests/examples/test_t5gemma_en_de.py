"""examples/t5gemma_en_de, run as its README says, at tiny size.

A random-weight T5Gemma written by transformers -> `t5forge convert --from hf` -> en->de
fine-tuning from the converted checkpoint (BLEU evaluated in training) -> `t5forge infer` ->
`t5forge serve`, whose greedy translation of a validation sentence is infer's.
"""

import json
import subprocess
import sys

import httpx
import pytest
from commands import REPO, command_env, python
from serving.server_helpers import free_port, wait_ready
from tiny_model import TINY_MODEL_GIN

pytestmark = pytest.mark.slow
EXAMPLE = "examples/t5gemma_en_de"
# Appended after the example's gin files: tests/tiny_model.py's widths and the Gemma fields that
# follow the layer count and head width.
TINY_T5GEMMA_GIN = TINY_MODEL_GIN + (
    "T5Config.query_pre_attn_scalar = 8.0\n"
    "T5Config.sliding_window = 3\n"
    "T5Config.encoder_layer_types = ('sliding_attention', 'full_attention')\n"
    "T5Config.decoder_layer_types = ('sliding_attention', 'full_attention')\n"
)
LENGTHS = "--gin.TASK_FEATURE_LENGTHS={'inputs': 24, 'targets': 8}"


def test_random_t5gemma_converted_finetuned_inferred_and_served(tmp_path, tiny_vocab, run_t5forge):
    tiny = tmp_path / "tiny_t5gemma.gin"
    tiny.write_text(TINY_T5GEMMA_GIN)
    env = {"T5FORGE_VOCAB": str(tiny_vocab), "T5FORGE_DATA_DIR": str(REPO / "t5forge/tasks/data")}
    hf_dir, converted = tmp_path / "hf", tmp_path / "converted"
    made = python(
        f"{EXAMPLE}/random_t5gemma.py",
        "--gin_file=models/t5gemma/s_s.gin",
        f"--gin_file={tiny}",
        f"--vocab={tiny_vocab}",
        f"--output={hf_dir}",
        timeout=120,
        check=True,
    )
    assert "random T5Gemma" in made.stdout
    assert json.loads((hf_dir / "config.json").read_text())["model_type"] == "t5gemma"
    run_t5forge(
        "convert", "--from", "hf", "--to", "t5forge", "--input", hf_dir, "--output", converted
    )

    finetuned = tmp_path / "finetune"
    trained = run_t5forge(
        "train",
        f"--gin_file={EXAMPLE}/finetune.gin",
        f"--gin_file={tiny}",
        f"--gin.MODEL_DIR={finetuned}",
        f"--gin.INITIAL_CHECKPOINT_PATH={converted}",
        "--gin.TRAIN_STEPS=4",
        "--gin.EVAL_PERIOD=4",
        "--gin.CHECKPOINT_PERIOD=4",
        "--gin.train.stats_period=2",
        "--gin.infer_eval/utils.DatasetConfig.batch_size=100",
        LENGTHS,
        env=env,
    )
    assert "kept 0 freshly initialised" in trained.stderr
    records = [json.loads(line) for line in (finetuned / "metrics.jsonl").read_text().splitlines()]
    assert any(r["step"] == 4 and "bleu" in r for r in records)

    run_t5forge(
        "infer",
        "--gin_file=runs/infer.gin",
        f"--gin_file={EXAMPLE}/en_de.gin",
        f"--gin_file={tiny}",
        f"--gin.CHECKPOINT_PATH={finetuned / 'checkpoint_4'}",
        f"--gin.INFER_OUTPUT_DIR={tmp_path / 'predict'}",
        LENGTHS,
        env=env,
    )
    predictions = (tmp_path / "predict" / "en_de_lohelp_translate-predict.jsonl").read_text()
    first = json.loads(predictions.splitlines()[0])
    assert first["inputs"].startswith("translate English to German:")

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "t5forge", "serve", "--checkpoint", str(finetuned)]
        + ["--port", str(port), "--warmup_num_beams", "0", "--max_batch_size", "1"]
        + ["--max_new_tokens", "8"]
        + ["--max_target_length", "8", "--log_level", "warning"],
        env=command_env(**env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}", process=server, every_shape=False)
        served = httpx.post(
            f"http://127.0.0.1:{port}/v1/predict",
            json={"inputs": [first["inputs"]], "max_new_tokens": 8},
            timeout=120,
        )
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert served.status_code == 200
    assert served.json()["outputs"] == [first["prediction"]]
