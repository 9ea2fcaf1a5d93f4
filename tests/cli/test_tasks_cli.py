"""`t5forge tasks list|show|preview` on the built-in tasks and real data."""

import pytest
from commands import t5forge_in_process

from t5forge.data import SentencePieceVocabulary
from t5forge.tasks.builtin import register_builtin_tasks


def test_list_names_every_builtin_task(capsys):
    assert t5forge_in_process("tasks", "list") == 0
    out = capsys.readouterr().out
    for name in ("en_de_lohelp_translate", "rotten_tomatoes_sentiment", "english_span_corruption"):
        assert f"task     {name}" in out


def test_show_prints_splits_steps_and_features(capsys, shared_data):
    assert t5forge_in_process("tasks", "show", "rotten_tomatoes_sentiment") == 0
    out = capsys.readouterr().out
    assert "split validation: 1000 examples" in out
    assert "classify(text_key='text', label_key='label', prefix='sentiment')" in out
    assert "metrics: accuracy, f1" in out


def test_preview_decodes_processed_examples(capsys, shared_data, test_spm_path, monkeypatch):
    monkeypatch.setenv("T5FORGE_VOCAB", "")  # restored after the test; --vocab sets it
    argv = [
        "tasks",
        "preview",
        "en_ro_messages_translate",
        "--split",
        "validation",
        "-n",
        "2",
        "--vocab",
        str(test_spm_path),
        "--sequence_length",
        "inputs=256,targets=256",
    ]
    assert t5forge_in_process(*argv) == 0
    out = capsys.readouterr().out
    assert out.count("--- example") == 2
    # the 26-piece test vocabulary lacks most letters: they decode as ⁇ (UNK)
    assert "  inputs (" in out and "translate  ⁇ n ⁇ lish to  ⁇ omanian: " in out
    assert "  targets (" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["tasks", "preview", "rotten_tomatos_sentiment"],
            "error: unknown task or mixture 'rotten_tomatos_sentiment'; did you mean "
            "rotten_tomatoes_sentiment?",
        ),
        (
            ["tasks", "preview", "rotten_tomatoes_sentiment", "--sequence_length", "inputs"],
            "error: --sequence_length 'inputs': write name=length pairs",
        ),
    ],
)
def test_mistakes_are_one_line(capsys, argv, message):
    assert t5forge_in_process(*argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


@pytest.fixture
def builtin_tasks_over(shared_data):
    """Registers the built-in tasks with a given vocabulary; fresh ones again afterwards.

    The built-in tasks read $T5FORGE_VOCAB once, so an earlier in-process command's
    vocabulary would otherwise stay with them.
    """
    yield lambda path: register_builtin_tasks(SentencePieceVocabulary(path, extra_ids=100))
    register_builtin_tasks()


def test_preview_shows_each_ul2_mode(capsys, tiny_vocab, builtin_tasks_over):
    builtin_tasks_over(tiny_vocab)
    assert t5forge_in_process("tasks", "preview", "english_ul2", "-n", "30") == 0
    out = capsys.readouterr().out
    inputs = [line for line in out.splitlines() if line.startswith("  inputs")]
    assert len(inputs) == 30
    modes = {mode for mode in ("[NLU]", "[NLG]", "[S2S]") for line in inputs if f": {mode}" in line}
    assert modes == {"[NLU]", "[NLG]", "[S2S]"}, out
    assert "<extra_id_0>" in out
