"""A resume on changed data is refused, whatever the source: `infer` killed mid-run and rerun,
`eval` rerun into its directory and `train` resumed, over a TFDS dataset that TFDS wrote, over
TFExample files that TensorFlow wrote and over a task cache, each with a shard changed between
the runs (real frames: records reordered, so the size stays and only the CRC tells, or one
replaced). Each is one line naming the changed file and the fix; the first run's output is
kept byte for byte. Rerun on unchanged data, the same output finishes (no false refusal)."""

from __future__ import annotations

import shutil

import pytest
from commands import python

from tests.data.tf_reference import FIXTURES, tfrecord_frames

from .conftest import error_line
from .test_output_identity import DIE_AFTER_FIRST_CHUNK

USER_TASKS = """
import functools, os
from t5forge.data import metrics, preprocessors as pp
from t5forge.data.tf_formats import feature_specs as tf
from t5forge.data import Feature, Task
from t5forge.data import TaskRegistry
from t5forge.data.sources.tfds import TfdsDataSource
from t5forge.data import TFExampleDataSource
from t5forge.data import EnvironmentSentencePieceVocabulary

features = {
    "inputs": Feature(EnvironmentSentencePieceVocabulary(extra_ids=100)),
    "targets": Feature(EnvironmentSentencePieceVocabulary(extra_ids=100)),
}
TaskRegistry.add(Task(
    "user_tfds",
    TfdsDataSource("wmt_t2t_translate/de-en:1.0.0"),
    [functools.partial(pp.translate, source_language="de", target_language="en"),
     pp.tokenize, pp.append_eos_after_trim],
    features,
    metric_fns=[metrics.bleu],
))
TaskRegistry.add(Task(
    "user_tfexample",
    TFExampleDataSource(
        {"validation": os.environ["USER_TFEXAMPLE_FILES"]},
        {"inputs": tf.FixedLenFeature([], tf.string), "targets": tf.FixedLenFeature([], tf.string)},
    ),
    [pp.tokenize, pp.append_eos_after_trim],
    features,
))
"""
WMT = "wmt_t2t_translate/de-en/1.0.0"
SHARD = "wmt_t2t_translate-{}.tfrecord-00001-of-00003"
REVIEW = "reviews-00001-of-00002.tfrecord"


def _reorder(path) -> None:
    path.write_bytes(b"".join(reversed(tfrecord_frames(path))))


def _replace_first(path) -> None:
    frames = tfrecord_frames(path)
    path.write_bytes(
        b"".join([tfrecord_frames(path.with_name(SHARD.format("test")))[0], *frames[1:]])
    )


CHANGES = {
    "records reordered": (_reorder, "same size"),
    "a record replaced": (_replace_first, "size"),
}


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    """The task module, a TFDS data dir and a folder of TFExample files, as TFDS and TF wrote them."""
    root = tmp_path_factory.mktemp("user")
    (root / "user_changed_data_tasks.py").write_text(USER_TASKS)
    shutil.copytree(
        FIXTURES / "tfrecord" / "wmt_t2t_translate", root / "tfds" / "wmt_t2t_translate"
    )
    shutil.copytree(FIXTURES / "tfexample", root / "tfexample")
    return root


def _data_copy(user_dir, tmp_path):
    """A changeable copy of the user's TFDS data dir and TFExample files."""
    shutil.copytree(user_dir / "tfds", tmp_path / "tfds")
    shutil.copytree(user_dir / "tfexample", tmp_path / "tfexample")
    return tmp_path


def _env(faults, user_dir, data):
    return faults.env(
        PYTHONPATH=user_dir, USER_TFEXAMPLE_FILES=f"{data}/tfexample/reviews-*.tfrecord"
    )


def _infer_args(faults, checkpoint, output, task, data, *extra):
    return [
        "infer",
        f"--gin_file={faults.gin}",
        "--gin_file=runs/infer.gin",
        "--gin.DROPOUT_RATE=0.0",
        f"--gin.CHECKPOINT_PATH={checkpoint}",
        f"--gin.INFER_OUTPUT_DIR={output}",
        f"--gin.MIXTURE_OR_TASK_NAME='{task}'",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 32, 'targets': 8}",
        "--gin.BATCH_SIZE=4",
        "--gin.infer.checkpoint_period=1",
        "--module_import=user_changed_data_tasks",
        f"--tfds_data_dir={data}/tfds",
        *extra,
    ]


def _cache(faults, user_dir, data, cache, *extra):
    faults.run(
        "cache-tasks", "--tasks=user_tfds", "--splits=validation", f"--output_cache_dir={cache}",
        "--module_import=user_changed_data_tasks", f"--tfds_data_dir={data}/tfds", *extra,
        env=_env(faults, user_dir, data), check=True,
    )  # fmt: skip


# source kind -> (task, extra infer flags given the cache dir, the file the change touches)
KINDS = {
    "tfds": (
        "user_tfds",
        lambda cache: [],
        lambda data: data / "tfds" / WMT / SHARD.format("validation"),
    ),
    "tfexample": ("user_tfexample", lambda cache: [], lambda data: data / "tfexample" / REVIEW),
    "cache": (
        "user_tfds",
        lambda cache: ["--gin.USE_CACHED_TASKS=True", f"--seqio_additional_cache_dirs={cache}"],
        lambda data: data / "tfds" / WMT / SHARD.format("validation"),
    ),
}
OUTPUT = "{}-predict.jsonl"
PROGRESS = ".{}-predict.progress.json"


@pytest.fixture(scope="module")
def killed(faults, trained, user_dir, tmp_path_factory):
    """kind -> (data, cache, output) of an infer over that kind of source killed after its
    first chunk of 5 (made once per kind)."""
    made = {}

    def make(kind):
        if kind not in made:
            task, flags, _ = KINDS[kind]
            root = tmp_path_factory.mktemp(f"killed_{kind}")
            data, cache, output = _data_copy(user_dir, root), root / "cache", root / "out"
            if kind == "cache":
                _cache(faults, user_dir, data, cache)
            args = _infer_args(faults, trained / "checkpoint_12", output, task, data, *flags(cache))
            result = python("-c", DIE_AFTER_FIRST_CHUNK, *args, env=_env(faults, user_dir, data))
            assert result.returncode == 137, result.stderr[-2000:]
            assert (output / PROGRESS.format(task)).is_file()
            made[kind] = data, cache, output
        return made[kind]

    return make


def _kept(output, task) -> dict[str, bytes]:
    return {name: (output / name.format(task)).read_bytes() for name in (OUTPUT, PROGRESS)}


# Every kind with one change; TFDS with both (the same-size change is the CRC's to see).
REFUSED = [("tfds", "records reordered"), ("tfds", "a record replaced"),
           ("tfexample", "records reordered"),
           pytest.param("cache", "a record replaced", marks=pytest.mark.slow)]  # fmt: skip


@pytest.mark.parametrize(("kind", "change"), REFUSED)
def test_infer_rerun_on_changed_data_is_refused(
    faults, trained, user_dir, killed, tmp_path, kind, change
):
    task, flags, shard = KINDS[kind]
    _, cache, output = killed(kind)
    data, output = (
        _data_copy(user_dir, tmp_path / "data"),
        shutil.copytree(output, tmp_path / "out"),
    )
    cache = shutil.copytree(cache, tmp_path / "cache") if kind == "cache" else cache
    kept = _kept(output, task)
    edit, named = CHANGES[change]
    edit(shard(data))
    if kind == "cache":  # the cache rebuilt from the changed data
        _cache(faults, user_dir, data, cache, "--overwrite")
    args = _infer_args(faults, trained / "checkpoint_12", output, task, data, *flags(cache))
    line = error_line(faults.run(*args, env=_env(faults, user_dir, data)))
    assert "was written by another run (data file" in line and "INFER_OUTPUT_DIR" in line, line
    # A cached run names the source's shard too: its files stand in for the cache made of them.
    assert f"{shard(data).name} changed ({named}" in line, line
    assert _kept(output, task) == kept


@pytest.mark.slow
def test_infer_rerun_on_a_rebuilt_cache_without_its_source_is_refused(
    faults, trained, user_dir, killed, tmp_path
):
    """Where the source's files are not here (a cache made on another machine), the cache's
    own files are the fingerprint. The killed run recorded its source's files, so the rerun's
    fingerprint differs from the first name on: refused (conservatively; a cache that recorded
    its source's fingerprint could tell an unchanged cache apart), the output kept."""
    task, flags, shard = KINDS["cache"]
    data, cache, output = killed("cache")
    data, output = (
        shutil.copytree(data, tmp_path / "data"),
        shutil.copytree(output, tmp_path / "out"),
    )
    cache = shutil.copytree(cache, tmp_path / "cache")
    kept = _kept(output, task)
    CHANGES["a record replaced"][0](shard(data))
    _cache(faults, user_dir, data, cache, "--overwrite")
    shutil.rmtree(shard(data).parent)
    args = _infer_args(faults, trained / "checkpoint_12", output, task, data, *flags(cache))
    line = error_line(faults.run(*args, env=_env(faults, user_dir, data)))
    assert (
        "was written by another run (data file dataset_info.json -> validation.array_record-"
        in (line)
    ), line
    assert _kept(output, task) == kept


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_infer_rerun_on_the_same_data_finishes_every_row_once(
    faults, trained, user_dir, killed, tmp_path, kind
):
    task, flags, _ = KINDS[kind]
    data, cache, output = killed(kind)
    output = shutil.copytree(output, tmp_path / "out")
    args = _infer_args(faults, trained / "checkpoint_12", output, task, data, *flags(cache))
    faults.run(*args, env=_env(faults, user_dir, data), check=True)
    rows = (output / OUTPUT.format(task)).read_text().splitlines()
    assert len(rows) == (40 if kind == "tfexample" else 20)
    assert not (output / PROGRESS.format(task)).exists()


def _user_flags(data) -> list[str]:
    return [
        "--module_import=user_changed_data_tasks",
        "--gin.MIXTURE_OR_TASK_NAME='user_tfds'",
        f"--tfds_data_dir={data}/tfds",
    ]


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_train_resume_on_changed_tfds_shards_is_refused(faults, user_dir, tmp_path):
    data, model_dir = _data_copy(user_dir, tmp_path / "data"), tmp_path / "run"
    env = _env(faults, user_dir, data)
    faults.train(model_dir, 2, *_user_flags(data), env=env, check=True, period=2)
    before = sorted(p.name for p in model_dir.iterdir())
    _reorder(data / "tfds" / WMT / SHARD.format("train"))
    line = error_line(faults.train(model_dir, 4, *_user_flags(data), env=env, period=2))
    assert f"was trained on other data (data file {SHARD.format('train')} changed (same size)" in (
        line
    ), line
    assert "INITIAL_CHECKPOINT_PATH" in line
    assert sorted(p.name for p in model_dir.iterdir()) == before


@pytest.mark.slow
def test_eval_rerun_on_changed_tfds_shards_is_refused(faults, trained, user_dir, tmp_path):
    data, output = _data_copy(user_dir, tmp_path / "data"), tmp_path / "eval"
    env = _env(faults, user_dir, data)
    args = [
        "eval",
        f"--gin_file={faults.gin}",
        "--gin_file=runs/eval.gin",
        "--gin.DROPOUT_RATE=0.0",
        f"--gin.CHECKPOINT_PATH={trained / 'checkpoint_12'}",
        f"--gin.EVAL_OUTPUT_DIR={output}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 32, 'targets': 8}",
        *_user_flags(data),
    ]
    faults.run(*args, env=env, check=True)
    kept = _files(output)
    _replace_first(data / "tfds" / WMT / SHARD.format("validation"))
    line = error_line(faults.run(*args, env=env))
    assert f"was written by another run (data file {SHARD.format('validation')} changed" in line
    assert "EVAL_OUTPUT_DIR" in line
    assert _files(output) == kept


def test_a_file_over_the_whole_file_limit_is_known_by_its_size_and_ends(tmp_path, monkeypatch):
    """With the limit lowered to 4 KiB (from 64 MiB) and 1 KiB ends: records appended or a
    first record rewritten change the fingerprint; an edit inside that keeps the size does
    not, the documented price of not reading all of C4 at every start."""
    from t5forge.run import output_identity

    monkeypatch.setattr(output_identity, "_WHOLE_FILE_LIMIT", 4096)
    monkeypatch.setattr(output_identity, "_SAMPLE", 1024)
    shard = tmp_path / "shard"
    original = (FIXTURES / "tfexample" / REVIEW).read_bytes()
    assert len(original) > 4096

    def fingerprint(data: bytes) -> list[int]:
        shard.write_bytes(data)
        return output_identity._size_and_crc(shard)

    start = fingerprint(original)
    assert start == [len(original), start[1]] and fingerprint(original) == start
    assert fingerprint(original + original[:100]) != start
    assert fingerprint(b"x" + original[1:]) != start
    middle = len(original) // 2
    assert fingerprint(original[:middle] + b"x" + original[middle + 1 :]) == start
