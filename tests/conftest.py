"""Shared fixtures: where the real datasets live, and small helpers used across test folders."""

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("T5FORGE_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


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
