"""`t5forge demo` (what `make demo` runs), end to end at tiny size.

The full run is measured in docs/measured-runs.md; here the same command trains its vocabulary, a
4-step model shrunk by gin flags, evaluates BLEU at step 0 and at the end, translates, and
prints where everything is.
"""

import json

import pytest

pytestmark = pytest.mark.slow

TINY = [
    "--gin.T5Config.emb_dim=32",
    "--gin.T5Config.head_dim=8",
    "--gin.T5Config.mlp_dim=64",
    "--gin.T5Config.num_encoder_layers=1",
    "--gin.T5Config.num_decoder_layers=1",
    "--gin.BATCH_SIZE=4",
    "--gin.EVAL_PERIOD=4",
    "--gin.CHECKPOINT_PERIOD=4",
    "--gin.train.stats_period=2",
]


def test_demo_trains_evaluates_translates_and_prints_paths(tmp_path, run_t5forge):
    model_dir = tmp_path / "demo"
    result = run_t5forge("demo", f"--model_dir={model_dir}", "--train_steps=4", *TINY)
    out = result.stdout
    assert "validation BLEU: " in out and "at step 0" in out and "at step 4" in out
    assert out.count("  ->  ") == 3  # the three sample translations
    for line in ("checkpoints and config.gin:", "predictions:", "training curves:", "TensorBoard:"):
        assert line in out
    assert (model_dir / "checkpoint_4").is_dir() and (model_dir / "training_curves.png").exists()
    evals = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in evals if "bleu" in r] == [0, 4]
