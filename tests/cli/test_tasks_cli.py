"""`t5forge tasks list|show|preview` on the built-in tasks and real data."""

import pytest

from t5forge.cli import main as cli


def test_list_names_every_builtin_task(capsys):
    assert cli.main(["tasks", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("en_de_lohelp_translate", "rotten_tomatoes_sentiment", "english_span_corruption"):
        assert f"task     {name}" in out


def test_show_prints_splits_steps_and_features(capsys, shared_data):
    assert cli.main(["tasks", "show", "rotten_tomatoes_sentiment"]) == 0
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
    assert cli.main(argv) == 0
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
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1
