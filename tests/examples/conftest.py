"""Fixtures for the example-workflow tests: a tiny model, a tiny vocabulary, the CLI runner.

Each example's gin file holds its full-size configuration; a test appends `tiny_model_gin`
(later gin files win) so the same commands run in seconds on a CPU.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from t5forge.data.vocab_trainer import file_texts, train_vocabulary

REPO = Path(__file__).resolve().parents[2]
BUNDLED_EN_DE = REPO / "t5forge" / "tasks" / "data" / "en_de_lohelp" / "train.jsonl.gz"

TINY_VOCAB_PIECES = 1000
TINY_MODEL_GIN = """
T5Config.vocab_size = 1152  # 1000 pieces + 100 sentinels, rounded up to a multiple of 128
T5Config.emb_dim = 32
T5Config.num_heads = 4
T5Config.num_encoder_layers = 2
T5Config.num_decoder_layers = 2
T5Config.head_dim = 8
T5Config.mlp_dim = 64
T5Config.dtype = 'float32'
"""


@pytest.fixture(scope="session")
def tiny_model_gin(tmp_path_factory) -> Path:
    """A gin file shrinking any example's T5Config to 2+2 layers of width 32 (1152 ids)."""
    path = tmp_path_factory.mktemp("tiny_model") / "tiny_model.gin"
    path.write_text(TINY_MODEL_GIN)
    return path


@pytest.fixture(scope="session")
def tiny_vocab(tmp_path_factory) -> Path:
    """A 1000-piece English+German SentencePiece model from the bundled en_de_lohelp slice."""
    path = tmp_path_factory.mktemp("tiny_vocab") / "spiece.model"
    texts = [t for i, t in enumerate(file_texts([str(BUNDLED_EN_DE)], "en")) if i < 3000]
    texts += [t for i, t in enumerate(file_texts([str(BUNDLED_EN_DE)], "de")) if i < 3000]
    train_vocabulary(texts, path, vocab_size=TINY_VOCAB_PIECES, extra_ids=100, progress=False)
    return path


@pytest.fixture(scope="session")
def example_env(shared_data) -> dict[str, str]:
    """The environment a user's shell would have: CPU JAX, the shared datasets, no buffering."""
    env = dict(os.environ)
    env.update(JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1", T5FORGE_DATA_DIR=str(shared_data))
    return env


@pytest.fixture(scope="session")
def run_t5forge(example_env):
    """Runs `t5forge ARGS...` from the repo root as a user would; fails the test on errors.

    Returns the CompletedProcess (text stdout/stderr). `env` entries are added to
    `example_env`.
    """

    def run(*args, env=None, timeout=600) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [sys.executable, "-m", "t5forge.cli.main", *map(str, args)], cwd=REPO,
            env={**example_env, **(env or {})}, capture_output=True, text=True, timeout=timeout,
        )
        assert result.returncode == 0, f"t5forge {args[0]} failed:\n{result.stderr[-3000:]}"
        return result

    return run
