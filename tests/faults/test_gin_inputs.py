"""Gin files that are not what they seem: an include loop, a binary or UTF-16 file, an include
found nowhere. Each is one `error:` line naming the file and the fix, exit status 2, before
anything runs (in process: the parse is all that happens)."""

from __future__ import annotations

import pytest
from commands import t5forge_in_process

INCLUDE_LOOP = {"a.gin": "include 'b.gin'\n", "b.gin": "include 'a.gin'\n"}

CASES = {  # files written into tmp_path, the --gin_file, what the one line says
    "includes itself": (
        {"self.gin": "T5Config.emb_dim = 8\ninclude 'self.gin'\n"},
        "self.gin",
        "self.gin includes itself; remove that `include` line",
    ),
    "two include each other": (
        INCLUDE_LOOP,
        "a.gin",
        "a.gin: gin files include each other in a loop ({tmp}/a.gin -> {tmp}/b.gin -> "
        "{tmp}/a.gin); remove one of those `include` lines",
    ),
    "binary file": (
        {"model.gin": b"\x89PNG\r\n\x1a\n\x00\x00"},
        "model.gin",
        "model.gin: not a gin file (byte 0x89 at offset 0 is not UTF-8 text); pass a gin text "
        "file in --gin_file or `include`",
    ),
    "UTF-16 file": (
        {"run.gin": "T5Config.emb_dim = 8\n".encode("utf-16")},
        "run.gin",
        "run.gin: not a gin file (byte 0xff at offset 0",
    ),
    "binary file behind an include": (
        {"run.gin": "include 'blob.gin'\n", "blob.gin": b"\x00\xff\xfe"},
        "run.gin",
        "blob.gin: not a gin file (byte 0xff at offset 1",
    ),
    "include found nowhere": (
        {"run.gin": "# a run\ninclude 'runs/nowhere.gin'\n"},
        "run.gin",
        "run.gin:2: `include 'runs/nowhere.gin'`: file not found (--gin_search_paths: {tmp}); "
        "add the folder it is relative to with --gin_search_paths=DIR",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_bad_gin_file_is_one_line_naming_it(case, tmp_path, capsys):
    files, gin_file, expected = CASES[case]
    for name, content in files.items():
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    status = t5forge_in_process(
        "train", f"--gin_file={tmp_path / gin_file}", f"--gin_search_paths={tmp_path}"
    )
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: {tmp_path}/"), line
    assert expected.format(tmp=tmp_path) in line


def test_a_bad_value_for_another_librarys_configurable_is_one_line(shared_data, tmp_path, capsys):
    """T5X's AdamW example with TRAIN_STEPS=2: its optax cosine decay lasts TRAIN_STEPS minus
    1000 warm-up steps, which optax refuses inside gin's call; a configuration error."""
    t5x_gin = shared_data.parent / "t5x_gin"
    if not t5x_gin.is_dir():
        pytest.skip(f"T5X's gin files not found at {t5x_gin}")
    status = t5forge_in_process(
        "train",
        f"--gin_search_paths={t5x_gin}",
        "--gin_file=t5x/examples/t5/t5_1_1/examples/base_wmt_from_scratch_adamw.gin",
        "--gin.MIXTURE_OR_TASK_NAME=en_de_lohelp_translate",
        f"--gin.MODEL_DIR={tmp_path}",
        "--gin.TRAIN_STEPS=2",
    )
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert line == (
        "error: OPTIMIZER/warmup_cosine_decay_schedule: The cosine_decay_schedule requires "
        "positive decay_steps, got decay_steps=-998.; fix its gin bindings"
    )
