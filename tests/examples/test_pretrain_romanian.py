"""examples/pretrain_romanian, run as its README says, at tiny size.

Own vocabulary -> span-corruption pretraining with the corpus streamed through Hugging Face
`datasets` from a user task module -> SIGKILL and rerun the same command (it resumes) ->
raise TRAIN_STEPS (it extends) -> convert to Hugging Face and check transformers' logits.
"""

import json
import signal
import time

import numpy as np
import pytest
from commands import t5forge, t5forge_popen

pytestmark = pytest.mark.slow


def _train_args(tiny_model_gin, model_dir, steps):
    return [
        "train",
        "--gin_file=examples/pretrain_romanian/pretrain.gin",
        f"--gin_file={tiny_model_gin}",
        "--module_import=examples.pretrain_romanian.tasks",
        f"--gin.MODEL_DIR={model_dir}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 64, 'targets': 16}",
        "--gin.BATCH_SIZE=8",
        "--gin.CHECKPOINT_PERIOD=5",
        "--gin.EVAL_PERIOD=10",
        "--gin.train.stats_period=1",
        "--gin.utils.SaveCheckpointConfig.async_save=False",
        f"--gin.TRAIN_STEPS={steps}",
    ]


def _logged_steps(model_dir, split) -> list[int]:
    records = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    return sorted({record["step"] for record in records if record["split"] == split})


def test_vocab_pretrain_kill_resume_extend_convert(
    tmp_path, shared_data, tiny_model_gin, example_env, run_t5forge
):
    vocab = tmp_path / "ro_spiece.model"
    run_t5forge(
        "vocab",
        "train",
        "--input",
        shared_data / "romanian_corpus" / "train.jsonl.gz",
        "--field",
        "text",
        "--vocab_size",
        "1000",
        "--input_sentence_size",
        "5000",
        "--output",
        vocab,
        "--no_progress",
    )
    env = {**example_env, "ROMANIAN_VOCAB": str(vocab)}
    model_dir = tmp_path / "run"

    process = t5forge_popen(*_train_args(tiny_model_gin, model_dir, 20), env=env)
    deadline = time.time() + 300
    while not (model_dir / "checkpoint_5").exists() and process.poll() is None:
        assert time.time() < deadline, "no checkpoint_5 after 300 s"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    stderr = process.communicate()[1]
    assert process.returncode == -signal.SIGKILL, stderr[-3000:]
    assert not (model_dir / "checkpoint_20").exists()

    rerun = t5forge(*_train_args(tiny_model_gin, model_dir, 20), env=env, timeout=300, check=True)
    assert "resumed from" in rerun.stderr
    assert (model_dir / "checkpoint_20").is_dir()

    extend = t5forge(*_train_args(tiny_model_gin, model_dir, 25), env=env, timeout=300, check=True)
    assert "(step 20)" in extend.stderr
    assert _logged_steps(model_dir, "train") == list(range(1, 26))
    assert _logged_steps(model_dir, "training_eval/pretrain_romanian") == [10, 20, 25]

    hf_dir = tmp_path / "hf"
    run_t5forge(
        "convert", "--from", "t5forge", "--to", "hf", "--input", model_dir, "--output", hf_dir
    )
    _assert_transformers_logits_match(model_dir / "checkpoint_25", hf_dir)


def _assert_transformers_logits_match(checkpoint, hf_dir):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import t5forge

    ours = t5forge.load(checkpoint)
    hf = transformers.T5ForConditionalGeneration.from_pretrained(hf_dir).eval()
    encoder = np.zeros((2, 12), np.int64)
    for row, text in enumerate(["Bună ziua, ce mai faci?", "Limba română."]):
        ids = [*ours.vocabulary.encode(text)[:11], 1]
        encoder[row, : len(ids)] = ids
    decoder = np.array([[0, 1099, 40, 41], [0, 1098, 42, 0]])
    with torch.no_grad():
        expected = hf(
            input_ids=torch.tensor(encoder),
            attention_mask=torch.tensor(encoder > 0),
            decoder_input_ids=torch.tensor(decoder),
        ).logits.numpy()
    np.testing.assert_allclose(ours.logits(encoder, decoder), expected, atol=1e-4)
