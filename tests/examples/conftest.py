"""Fixtures for the example-workflow tests: the user's environment and the CLI runner.

Each example's gin file holds its full-size configuration; a test appends `tiny_model_gin`
(tests/conftest.py; later gin files win) so the same commands run in seconds on a CPU.
"""

import pytest
from commands import command_env, t5forge


@pytest.fixture(scope="session")
def example_env(shared_data) -> dict[str, str]:
    """The environment a user's shell would have: CPU JAX, the shared datasets, no buffering."""
    return command_env(T5FORGE_DATA_DIR=shared_data)


@pytest.fixture(scope="session")
def run_t5forge(example_env):
    """Runs `t5forge ARGS...` from the repo root as a user would; fails the test on errors.

    Returns the CompletedProcess (text stdout/stderr). `env` entries are added to
    `example_env`.
    """

    def run(*args, env=None, timeout=600):
        return t5forge(*args, env={**example_env, **(env or {})}, timeout=timeout, check=True)

    return run


@pytest.fixture(scope="session")
def sentiment_vocab(tmp_path_factory, shared_data, run_t5forge):
    """`vocab train` as examples/classify_sentiment's README runs it, at 1000 pieces.

    English and review text, byte fallback, the labels `fresh` and `rotten` whole pieces;
    the sentiment and UL2 examples' tests share it.
    """
    vocab = tmp_path_factory.mktemp("sentiment_vocab") / "spiece.model"
    corpora = [
        shared_data / name / "train.jsonl.gz" for name in ("english_corpus", "rotten_tomatoes")
    ]
    run_t5forge(
        "vocab",
        "train",
        *[arg for corpus in corpora for arg in ("--input", f"{corpus}:text")],
        "--vocab_size",
        "1000",
        "--input_sentence_size",
        "20000",
        "--byte_fallback",
        "--whole_words",
        "fresh,rotten",
        "--output",
        vocab,
        "--no_progress",
    )
    return vocab
