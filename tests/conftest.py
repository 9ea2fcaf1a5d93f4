"""Shared fixtures: where the real datasets live, the tiny model and vocabulary end-to-end tests
train, one compilation cache for every command a test starts, the tiny run they share, and
compiled programs let go before a worker runs out of memory mappings."""

import gc
import os
import shutil
from pathlib import Path

import pytest
from commands import LAYOUT_GIN, SUITE_XLA_FLAGS, TinyRuns
from tiny_model import TINY_MODEL_GIN, TINY_VOCAB_PIECES

from t5forge.data.vocab_trainer import file_texts, train_vocabulary

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("T5FORGE_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
# The built-in tasks read the full datasets here, as a user sets it (the installed package
# alone only has its bundled en-de slice); set before any test registers them.
os.environ.setdefault("T5FORGE_DATA_DIR", str(SHARED_DATA))
# Before any test starts XLA's backend, which reads its flags once.
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {SUITE_XLA_FLAGS}".strip()
BUNDLED_EN_DE = REPO_ROOT / "t5forge" / "tasks" / "data" / "en_de_lohelp" / "train.jsonl.gz"


@pytest.fixture(scope="session", autouse=True)
def compilation_cache(tmp_path_factory):
    """One JAX persistent compilation cache for every process the session starts.

    A command compiles the same tiny programs as the commands before it; read from the cache,
    XLA:CPU's executables are the ones it would build (the bitwise-resume tests hold), and a
    tiny `t5forge train` takes about half as long. The test process itself reads no cache: its
    programs are compiled once anyway.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path_factory.mktemp("jax_cache")))
        patch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        patch.setenv("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
        yield


# Memory mappings a test process may hold before its compiled programs are let go: XLA:CPU
# maps each executable's code in about three regions, a worker that ran half the suite held
# ~35,000, and at Linux's default vm.max_map_count (65,530) LLVM's next compile fails
# ("LLVM compilation error: Cannot allocate memory") and the worker segfaults (stop 56's CI,
# two full runs on 2026-11-29, each inside a serving test's warm-up compile). One file has
# added over 25,000 before its end, hence the margin.
MAX_MAPPINGS = 20_000


@pytest.fixture(scope="module", autouse=True)
def compiled_programs_released():
    """After a test file, JAX's caches are cleared where the process holds over MAX_MAPPINGS
    mappings, which unmaps the executables nothing else holds (300 small programs: 1,406
    mappings -> 525). Only then: programs a later file shares are compiled again."""
    yield
    if not os.path.exists("/proc/self/maps"):  # not Linux: no such limit to meet
        return
    with open("/proc/self/maps") as maps:
        mappings = sum(1 for _ in maps)
    if mappings > MAX_MAPPINGS:
        import jax

        jax.clear_caches()
        gc.collect()


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
    """tests/tiny_model.py's TINY_MODEL_GIN as a file, for `tiny_vocab`."""
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
def tiny_runs(tmp_path_factory, tiny_vocab) -> TinyRuns:
    """Commands on the tiny model in the T5 1.1 layout, the tiny vocabulary and bundled data."""
    root = tmp_path_factory.mktemp("tiny_runs")
    (root / "tiny.gin").write_text(TINY_MODEL_GIN + LAYOUT_GIN)
    shutil.copy(tiny_vocab, root / "spm.model")
    return TinyRuns(root, root / "spm.model")


@pytest.fixture(scope="session")
def tiny_trained(tiny_runs) -> Path:
    """A finished 12-step `tiny_runs.train` with checkpoints 5, 10 and 12 (never modify it: copy).

    Shared by the end-to-end tests that read a trained model: the faults, eval/infer/convert.
    """
    model_dir = tiny_runs.root / "trained"
    tiny_runs.train(model_dir, 12, check=True)
    return model_dir


@pytest.fixture
def amx_setting():
    """Restores the compiled AMX int8 kernel's switch after a test that flips it."""
    from t5forge.models import native_products

    before = native_products.amx_int8_products()
    yield
    native_products.amx_int8_products(before)
