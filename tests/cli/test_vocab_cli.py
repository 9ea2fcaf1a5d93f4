"""`t5forge vocab train`: in process and through `python -m t5forge.cli.main`."""

import subprocess
import sys
from pathlib import Path

from sentencepiece import SentencePieceProcessor

from t5forge.cli import main as cli_main
from t5forge.cli import vocab

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_train_prints_the_summary_and_writes_the_model(shared_data, tmp_path, capsys):
    output = tmp_path / "out" / "spiece.model"
    status = vocab.main([
        "train", "--input", str(shared_data / "rotten_tomatoes" / "*.jsonl.gz"),
        "--field", "text", "--vocab_size", "1500", "--extra_ids", "100",
        "--model_type", "unigram", "--byte_fallback", "--input_sentence_size", "5000",
        "--output", str(output), "--no_progress",
    ])
    assert status == 0
    printed = capsys.readouterr().out
    assert f"wrote {output} (unigram)" in printed
    assert "1500 pieces + 100 extra ids = 1600" in printed
    assert "character coverage:" in printed and "pieces per word:" in printed
    processor = SentencePieceProcessor(model_file=str(output))
    assert processor.get_piece_size() == 1500 and processor.id_to_piece(1) == "</s>"


def test_dispatcher_reports_user_errors_in_one_line(tmp_path, capsys):
    status = cli_main.main(["vocab", "train", "--input", str(tmp_path / "missing*.txt"),
                            "--vocab_size", "100", "--output", str(tmp_path / "x.model")])
    assert status == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: no input file matches") and "\n" not in error


def test_python_module_entry_point(shared_data, tmp_path):
    text = tmp_path / "sentences.txt"
    text.write_text("".join(f"sentence number {i} is about the {w} and more\n"
                            for i, w in enumerate(["cat", "dog", "tree", "river"] * 200)))
    output = tmp_path / "spiece.model"
    result = subprocess.run(
        [sys.executable, "-m", "t5forge.cli.main", "vocab", "train", "--input", str(text),
         "--vocab_size", "200", "--model_type", "bpe", "--output", str(output)],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "200 pieces + 100 extra ids = 300" in result.stdout
    assert output.stat().st_size > 0
