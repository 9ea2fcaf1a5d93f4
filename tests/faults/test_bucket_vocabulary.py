"""A user's `gs://` vocabulary on a machine that cannot read the bucket: the T5X README's
tasks.py, unchanged, names `gs://t5-data/vocabs/cc_all.32000/sentencepiece.model`. Importing it
reads nothing (SeqIO reads a vocabulary when it is first used); using it says in one line how to
map the bucket path to a local copy, and `T5FORGE_VOCAB_MAP` does, for the user's file and for
`T5FORGE_VOCAB` alike.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
from commands import TASK
from tiny_model import TINY_GIN_VALUES

from faults.conftest import error_line
from t5forge.data.vocabulary_locations import mapped_location

USER_DIR = Path(__file__).resolve().parents[1] / "seqio_port" / "t5x_user_dir"
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "tfds_fixtures" / "array_record"
README_VOCABULARY = "gs://t5-data/vocabs/cc_all.32000/sentencepiece.model"
USER_TASK = "wmt_t2t_de_en_v003"
# Without gcsfs the bucket cannot be read here whatever the network; with it, it might be.
needs_unreadable_bucket = pytest.mark.skipif(
    importlib.util.find_spec("gcsfs") is not None, reason="gcsfs may reach the bucket"
)


@pytest.fixture
def user_dir(tmp_path) -> Path:
    """The README's user directory as T5X writes it (the gs:// vocabulary included)."""
    return Path(shutil.copytree(USER_DIR, tmp_path / "user_dir"))


@pytest.fixture
def mirror(tmp_path, test_spm_path) -> Path:
    """A local folder laid out as gs://t5-data/vocabs (SeqIO's test model as cc_all.32000)."""
    folder = tmp_path / "t5-vocabs"
    (folder / "cc_all.32000").mkdir(parents=True)
    shutil.copy(test_spm_path, folder / "cc_all.32000" / "sentencepiece.model")
    return folder


def tasks_command(faults, user_dir: Path, *args, **env):
    return faults.run(
        "tasks",
        *args,
        "--module_import=tasks",
        env=faults.env(PYTHONPATH=user_dir, TFDS_DATA_DIR=FIXTURES, **env),
    )


def test_the_readme_tasks_module_imports_without_reading_its_bucket(faults, user_dir):
    result = tasks_command(faults, user_dir, "list")
    assert result.returncode == 0, result.stderr[-3000:]
    assert USER_TASK in result.stdout


@needs_unreadable_bucket
def test_an_unreadable_bucket_vocabulary_says_how_to_map_it(faults, user_dir):
    line = error_line(tasks_command(faults, user_dir, "preview", USER_TASK, "-n", "1"))
    assert line.startswith(f"error: {README_VOCABULARY}: "), line
    assert "T5FORGE_VOCAB_MAP=gs://t5-data/vocabs/cc_all.32000=/local/folder" in line, line


def test_a_mapped_bucket_vocabulary_reads_the_local_copy(faults, user_dir, mirror, tmp_path):
    mapped = tasks_command(
        faults,
        user_dir,
        "preview",
        USER_TASK,
        "-n",
        "2",
        T5FORGE_VOCAB_MAP=f"gs://t5-data/vocabs={mirror}",
    )
    assert mapped.returncode == 0, mapped.stderr[-3000:]
    # The same directory with the local path written into tasks.py shows the same examples.
    edited = Path(shutil.copytree(USER_DIR, tmp_path / "edited"))
    local = mirror / "cc_all.32000" / "sentencepiece.model"
    (edited / "tasks.py").write_text(
        (edited / "tasks.py").read_text().replace(README_VOCABULARY, str(local))
    )
    written = tasks_command(faults, edited, "preview", USER_TASK, "-n", "2")
    assert written.returncode == 0, written.stderr[-3000:]
    assert mapped.stdout == written.stdout and "tokens)" in mapped.stdout


def test_t5forge_vocab_naming_the_bucket_goes_through_the_same_map(faults, mirror):
    result = faults.run(
        "tasks",
        "preview",
        TASK,
        "-n",
        "1",
        env=faults.env(
            T5FORGE_VOCAB=README_VOCABULARY, T5FORGE_VOCAB_MAP=f"gs://t5-data/vocabs={mirror}"
        ),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tokens)" in result.stdout


BAD_MAPS = {
    "no folder": ("gs://t5-data/vocabs", "T5FORGE_VOCAB_MAP entry 'gs://t5-data/vocabs' is not"),
    "no prefix": ("=/data/vocabs", "T5FORGE_VOCAB_MAP entry '=/data/vocabs' is not PREFIX=FOLDER"),
    "a folder without the file": (
        "gs://t5-data/vocabs={tmp}",
        "cannot read vocabulary file {tmp}/cc_all.32000/sentencepiece.model "
        f"({README_VOCABULARY}, mapped)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_MAPS))
def test_a_wrong_vocabulary_map_is_one_line(faults, user_dir, tmp_path, case):
    value, said = (text.format(tmp=tmp_path) for text in BAD_MAPS[case])
    line = error_line(
        tasks_command(faults, user_dir, "preview", USER_TASK, "-n", "1", T5FORGE_VOCAB_MAP=value)
    )
    assert said in line, line


@pytest.mark.parametrize(
    "mapping, path, read_from",
    [
        ("gs://t5-data/vocabs=/v", README_VOCABULARY, "/v/cc_all.32000/sentencepiece.model"),
        ("gs://t5-data/vocabs/=/v", README_VOCABULARY, "/v/cc_all.32000/sentencepiece.model"),
        (
            "gs://t5-data=/a,gs://t5-data/vocabs=/b",
            README_VOCABULARY,
            "/b/cc_all.32000/sentencepiece.model",
        ),
        ("gs://t5-data/vocab=/v", README_VOCABULARY, README_VOCABULARY),  # not a folder of it
        ("", README_VOCABULARY, README_VOCABULARY),
        (f"{README_VOCABULARY}=/v/spm.model", README_VOCABULARY, "/v/spm.model"),  # one file
    ],
)
def test_the_longest_mapped_folder_wins(monkeypatch, mapping, path, read_from):
    monkeypatch.setenv("T5FORGE_VOCAB_MAP", mapping)
    assert mapped_location(path) == read_from


@pytest.mark.slow
def test_the_readme_user_directory_trains_unchanged_through_the_map(
    faults, user_dir, mirror, shared_data, tmp_path
):
    """The README's training command, its tasks.py and gin file as T5X writes them, a tiny
    network and 2 steps: the gs:// vocabulary is read from the mapped copy."""
    t5x_gin = shared_data.parent / "t5x_gin"
    if not t5x_gin.is_dir():
        pytest.skip(f"T5X's gin files not found at {t5x_gin}")
    (tmp_path / "clones").mkdir()
    (tmp_path / "clones" / "t5x-tmp").symlink_to(t5x_gin)  # the README's checkout name
    model_dir = tmp_path / "model"
    result = faults.run(
        "train",
        f"--gin_search_paths={user_dir},{tmp_path / 'clones'},{t5x_gin}",
        "--gin_file=t5_1_1_base_de_en.gin",
        f'--gin.MODEL_DIR="{model_dir}"',
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 16, 'targets': 16}",
        "--gin.TRAIN_STEPS=2",
        "--gin.BATCH_SIZE=4",
        "--gin.partitioning.PjitPartitioner.num_partitions=1",
        "--gin.train.eval_period=2",
        "--gin.train.eval_steps=1",
        *(f"--gin.network.T5Config.{k}={v}" for k, v in TINY_GIN_VALUES.items()),
        f"--tfds_data_dir={FIXTURES}",
        env=faults.env(PYTHONPATH=user_dir, T5FORGE_VOCAB_MAP=f"gs://t5-data/vocabs={mirror}"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (model_dir / "checkpoint_2").is_dir()
    # The copy it read is the model's vocabulary, as a local path's would be.
    copy = mirror / "cc_all.32000" / "sentencepiece.model"
    assert (model_dir / "spiece.model").read_bytes() == copy.read_bytes()
    assert "gs://t5-data" in (user_dir / "tasks.py").read_text()  # as T5X wrote it
