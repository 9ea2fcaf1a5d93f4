"""Shared fixtures: where the real datasets live, the tiny model and vocabulary end-to-end tests
train, and small helpers used across test folders."""

import os
from pathlib import Path

import pytest

from t5forge.data.vocab_trainer import file_texts, train_vocabulary

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("T5FORGE_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
# The built-in tasks read the full datasets here, as a user sets it (the installed package
# alone only has its bundled en-de slice); set before any test registers them.
os.environ.setdefault("T5FORGE_DATA_DIR", str(SHARED_DATA))
BUNDLED_EN_DE = REPO_ROOT / "t5forge" / "tasks" / "data" / "en_de_lohelp" / "train.jsonl.gz"

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
def shared_data() -> Path:
    """The real datasets and T5X test checkpoints beside the checkout (../shared/data)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA} (set T5FORGE_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def test_spm_path(shared_data) -> Path:
    """seqio's 26-piece SentencePiece test model."""
    return shared_data / "vocab" / "sentencepiece.model"


@pytest.fixture(scope="session")
def tiny_model_gin(tmp_path_factory) -> Path:
    """A gin file shrinking any T5Config to 2+2 layers of width 32 (1152 ids), for `tiny_vocab`.

    Appended after a full-size gin file (later gin files win), it lets real commands run in
    seconds on a CPU.
    """
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
