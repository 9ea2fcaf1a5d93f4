"""`t5forge vocab train`: in process and through `python -m t5forge`."""

import json
import sys
from pathlib import Path

from commands import t5forge, t5forge_in_process
from sentencepiece import SentencePieceProcessor

from t5forge.data import TaskRegistry


def test_train_prints_the_summary_and_writes_the_model(shared_data, tmp_path, capsys):
    output = tmp_path / "out" / "spiece.model"
    status = t5forge_in_process(
        "vocab",
        "train",
        "--input",
        str(shared_data / "rotten_tomatoes" / "*.jsonl.gz"),
        "--field",
        "text",
        "--vocab_size",
        "1500",
        "--extra_ids",
        "100",
        "--model_type",
        "unigram",
        "--byte_fallback",
        "--input_sentence_size",
        "5000",
        "--output",
        str(output),
        "--no_progress",
    )
    assert status == 0
    printed = capsys.readouterr().out
    assert f"wrote {output} (unigram)" in printed
    assert "1500 pieces + 100 extra ids = 1600" in printed
    assert "character coverage:" in printed and "pieces per word:" in printed
    processor = SentencePieceProcessor(model_file=str(output))
    assert processor.get_piece_size() == 1500 and processor.id_to_piece(1) == "</s>"


def test_dispatcher_reports_user_errors_in_one_line(tmp_path, capsys):
    status = t5forge_in_process(
        "vocab",
        "train",
        "--input",
        str(tmp_path / "missing*.txt"),
        "--vocab_size",
        "100",
        "--output",
        str(tmp_path / "x.model"),
    )
    assert status == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: no input file matches") and "\n" not in error


def test_python_module_entry_point(shared_data, tmp_path):
    text = tmp_path / "sentences.txt"
    text.write_text(
        "".join(
            f"sentence number {i} is about the {w} and more\n"
            for i, w in enumerate(["cat", "dog", "tree", "river"] * 200)
        )
    )
    output = tmp_path / "spiece.model"
    result = t5forge(
        "vocab",
        "train",
        "--input",
        str(text),
        "--vocab_size",
        "200",
        "--model_type",
        "bpe",
        "--output",
        str(output),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "200 pieces + 100 extra ids = 300" in result.stdout
    assert output.stat().st_size > 0


def _write_jsonl(path: Path, field: str, sentences) -> None:
    path.write_text("".join(json.dumps({field: s}) + "\n" for s in sentences))


def test_each_input_names_its_own_field(tmp_path, capsys):
    english = [f"the cat number {i} sat on the mat" for i in range(300)]
    german = [f"die Katze Nummer {i} fuhr los" for i in range(300)]
    _write_jsonl(tmp_path / "english.jsonl", "text", english)
    for half in (0, 1):
        _write_jsonl(tmp_path / f"pairs_{half}.jsonl", "de", german[half::2])
    output = tmp_path / "spiece.model"
    status = t5forge_in_process(
        "vocab",
        "train",
        "--input",
        str(tmp_path / "english.jsonl"),
        "--input",
        f"{tmp_path / 'pairs_*.jsonl'}:de",
        "--vocab_size",
        "40",
        "--output",
        str(output),
        "--no_progress",
    )
    assert status == 0
    # Every sentence of both inputs was read: 600 less the 6 held out for the summary.
    assert "training sentences:  594" in capsys.readouterr().out


def test_task_from_a_module_import(tmp_path, monkeypatch, capsys):
    rows = tmp_path / "reviews.jsonl"
    _write_jsonl(rows, "body", [f"review {i}: a fine film with a plot" for i in range(200)])
    (tmp_path / "user_vocab_tasks.py").write_text(
        "from t5forge.data import ByteVocabulary, Feature, JsonLinesSource, TaskRegistry\n"
        f"TaskRegistry.add('user_vocab_reviews', JsonLinesSource({{'train': [{str(rows)!r}]}}),\n"
        "                 output_features={'targets': Feature(ByteVocabulary())})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        status = t5forge_in_process(
            "vocab",
            "train",
            "--task",
            "user_vocab_reviews",
            "--module_import",
            "user_vocab_tasks",
            "--field",
            "body",
            "--vocab_size",
            "40",
            "--output",
            str(tmp_path / "spiece.model"),
            "--no_progress",
        )
    finally:
        TaskRegistry.remove("user_vocab_reviews")
        sys.modules.pop("user_vocab_tasks", None)
    assert status == 0
    assert "training sentences:  198" in capsys.readouterr().out
