"""SeqIO's public names that task modules use, on t5forge: signatures, behaviour, and one
error line for what t5forge does not do (tf.data preprocessors, TensorFlow ops)."""

import json
import sys
from pathlib import Path

import pytest
from t5x_user_dir_setup import load_user_tasks

from t5forge import seqio
from t5forge.compat import STAND_INS, stand_in_modules
from t5forge.data import get_mixture_or_task
from t5forge.errors import ConfigError, DataError

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "tfds_fixtures"


@pytest.fixture(scope="module")
def vocab(test_spm_path):
    return seqio.SentencePieceVocabulary(str(test_spm_path), extra_ids=100)


def rows(split, shuffle_files=False):
    return [{"text": f"row {i} of {split}", "ids": [5, 6, 7][: i + 1]} for i in range(3)]


def _task(name, vocab, preprocessors, features=None, source=None):
    seqio.TaskRegistry.remove(name)
    return seqio.TaskRegistry.add(
        name,
        source=source or seqio.FunctionDataSource(rows, splits=["train"]),
        preprocessors=preprocessors,
        output_features=features
        or {
            "inputs": seqio.Feature(vocab, add_eos=True),
            "targets": seqio.Feature(vocab, add_eos=False),
        },
    )


def test_feature_takes_seqio_arguments_and_tf_dtypes(vocab):
    with stand_in_modules():
        import tensorflow as tf
    feature = seqio.Feature(vocab, True, False, tf.int32, 1)
    assert (feature.add_eos, feature.required, feature.dtype, feature.rank) == (
        True,
        False,
        "int32",
        1,
    )
    assert seqio.Feature(vocab, dtype=tf.int64).dtype == "int64"
    with pytest.raises(ConfigError, match="rank"):
        seqio.Feature(vocab, rank=2)


def test_registries_get_dataset_and_converters(vocab):
    to_text = seqio.map_over_dataset(lambda ex: {"inputs": ex["text"], "targets": ex["text"]})
    task = _task("seqio_api_task", vocab, [to_text, seqio.preprocessors.tokenize_and_append_eos])
    assert seqio.get_mixture_or_task("seqio_api_task") is task
    assert seqio.get_subtasks("seqio_api_task") == [task]
    seqio.MixtureRegistry.remove("seqio_api_mix")
    mixture = seqio.MixtureRegistry.add("seqio_api_mix", ["seqio_api_task"], default_rate=1.0)
    assert mixture.tasks == [task]
    first = next(iter(task.get_dataset("train", shuffle=False)))
    assert first["inputs"][-1] == vocab.eos_id and first["targets"][-1] != vocab.eos_id
    lengths = {"inputs": 8, "targets": 8}
    converted = seqio.get_dataset(
        "seqio_api_task", lengths, seqio.EncDecFeatureConverter(pack=False), batch_size=2
    )
    batch = next(iter(converted))
    assert batch["encoder_input_tokens"].shape == (2, 8)
    lm = next(iter(seqio.get_dataset("seqio_api_task", lengths, seqio.LMFeatureConverter())))
    assert set(lm) >= {"decoder_target_tokens", "decoder_segment_ids"}
    passed = next(
        iter(seqio.get_dataset("seqio_api_task", lengths, seqio.PassThroughFeatureConverter()))
    )
    assert passed["inputs_pretokenized"] == "row 0 of train"


def test_encoder_feature_converter_loss_on_masked_positions():
    converter = seqio.EncoderFeatureConverter(mask_id=9, pack=True)
    examples = [
        {"inputs": [8, 9, 9, 3, 4, 1], "targets": [8, 7, 4, 3, 4, 1]},
        {"inputs": [8, 3, 9, 1], "targets": [8, 3, 6, 1]},
    ]
    (row,) = converter.convert(examples, {"inputs": 11, "targets": 11})
    # SeqIO's own docstring example
    assert row["encoder_input_tokens"].tolist() == [8, 9, 9, 3, 4, 1, 8, 3, 9, 1, 0]
    assert row["encoder_target_tokens"].tolist() == [8, 7, 4, 3, 4, 1, 8, 3, 6, 1, 0]
    assert row["encoder_segment_ids"].tolist() == [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 0]
    assert row["encoder_positions"].tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0]
    assert row["encoder_loss_weights"].tolist() == [0, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0]


def test_pass_through_vocabulary_and_truncate_inputs_left():
    vocab = seqio.PassThroughVocabulary(size=50, eos_id=1)
    assert vocab.encode([4, 5]) == [4, 5] and vocab.decode([4, 5]) == [4, 5]
    features = {"inputs": seqio.Feature(vocab), "targets": seqio.Feature(vocab)}
    pre = [
        seqio.preprocessors.rekey.bind(key_map={"inputs": "ids", "targets": "ids"}),
        seqio.preprocessors.append_eos,
        seqio.preprocessors.truncate_inputs_left,
    ]
    task = _task("seqio_api_ids", vocab, pre, features)
    examples = list(
        task.get_dataset("train", sequence_length={"inputs": 2, "targets": 9}, shuffle=False)
    )
    assert [ex["inputs"].tolist() for ex in examples] == [[5, 1], [6, 1], [7, 1]]
    assert examples[2]["targets"].tolist() == [5, 6, 7, 1]


def test_fully_cached_task_fixes_its_lengths(vocab):
    to_text = seqio.map_over_dataset(lambda ex: {"inputs": ex["text"], "targets": ex["text"]})
    _task(
        "seqio_api_cached",
        vocab,
        [to_text, seqio.preprocessors.tokenize, seqio.preprocessors.append_eos_after_trim],
    )
    lengths = {"inputs": 4, "targets": 3}
    task = seqio.experimental.add_fully_cached_task("seqio_api_cached", lengths)
    assert task.name == "seqio_api_cached_i4_t3"
    assert [p.name for p in task.uncached_preprocessors] == ["_CheckLengths"]
    first = next(iter(task.get_dataset("train", shuffle=False)))
    assert len(first["inputs"]) == 4 and first["inputs"][-1] == vocab.eos_id
    with pytest.raises(DataError, match="cut to"):
        next(iter(task.get_dataset("train", sequence_length={"inputs": 8, "targets": 8})))
    seqio.TaskRegistry.remove(task.name)


def test_tensorflow_op_in_a_task_module_is_one_line_naming_the_function(vocab):
    with stand_in_modules():
        import tensorflow as tf

    def to_inputs(ex):
        return {"inputs": tf.strings.join(["x", ex["text"]]), "targets": ex["text"]}

    task = _task("seqio_api_tf", vocab, [seqio.map_over_dataset(to_inputs)])
    with pytest.raises(DataError) as error:
        next(iter(task.get_dataset("train")))
    message = str(error.value)
    assert "\n" not in message
    assert "to_inputs (test_seqio_api.py:" in message and "tf.strings.join" in message
    assert "plain Python" in message


def test_a_tf_data_preprocessor_is_one_line(vocab):
    def add_prefix(dataset, output_features):
        return dataset.map(lambda ex: ex)

    with pytest.raises(DataError, match="add_prefix takes a tf.data dataset"):
        _task("seqio_api_dataset_fn", vocab, [add_prefix])


def test_stand_ins_leave_sys_modules_as_they_were():
    sys.modules["tensorflow_datasets"] = marker = object()
    try:
        with stand_in_modules():
            import seqio as inside
            import tensorflow_datasets

            assert inside is seqio and tensorflow_datasets is not marker
        assert sys.modules["tensorflow_datasets"] is marker
        assert not [n for n in STAND_INS if n in sys.modules and n != "tensorflow_datasets"]
    finally:
        del sys.modules["tensorflow_datasets"]


def test_t5x_readme_user_dir_loads_and_yields_examples(test_spm_path, tmp_path):
    name = load_user_tasks(tmp_path, test_spm_path)
    task = get_mixture_or_task(name)
    seqio.set_tfds_data_dir_override(str(FIXTURES / "array_record"))
    try:
        first = next(iter(task.get_dataset("validation", shuffle=False)))
    finally:
        seqio.set_tfds_data_dir_override(None)
    assert first["inputs_pretokenized"].startswith("translate German to English: ")
    assert task.metric_fns[0](["a b c d"], ["a b c d"])["bleu"] == pytest.approx(100.0)


def test_loggers_write_what_seqio_writes(tmp_path, caplog):
    dataset = [{"inputs_pretokenized": "a"}, {"inputs_pretokenized": "b"}]
    inferences = {"predictions": ["x", "b"]}
    for logger in (
        seqio.JSONLogger(str(tmp_path)),
        seqio.TensorBoardLogger(str(tmp_path)),
        seqio.PyLoggingLogger(str(tmp_path)),
    ):
        with caplog.at_level("INFO"):
            logger("task_a", 7, {"accuracy": 50.0}, dataset, inferences, ["a", "b"])
    assert (tmp_path / "task_a-metrics.jsonl").read_text() == '{"step": 7, "accuracy": 50.0}\n'
    rows = (tmp_path / "task_a-000007.jsonl").read_text().splitlines()
    assert [json.loads(r) for r in rows][1] == {
        "input": {"inputs_pretokenized": "b"},
        "target": "b",
        "predictions": "b",
    }
    assert list((tmp_path / "task_a").glob("events.out.tfevents.*"))
    assert "task_a/accuracy at step 7: 50.000" in caplog.text


def test_tasks_list_shows_t5_tasks_before_their_data_is_prepared(capsys, monkeypatch, tmp_path):
    from commands import t5forge_in_process

    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path))
    assert t5forge_in_process("tasks", "list", "--module_import=t5.data.mixtures") == 0
    out = capsys.readouterr().out
    assert "wmt_t2t_ende_v003                    splits: (data not found)" in out
    assert "mixture  glue_v002_proportional" in out


def test_tf_example_source_written_with_tensorflow_names(vocab):
    """A task module's TFExampleDataSource as SeqIO users write it: tf.io features, tf dtypes
    and tf.data.TFRecordDataset as the reader."""
    with stand_in_modules():
        import tensorflow as tf
    source = seqio.TFExampleDataSource(
        {"train": str(FIXTURES / "tfexample" / "reviews-*.tfrecord")},
        feature_description={
            "inputs": tf.io.FixedLenFeature([], tf.string),
            "targets": tf.io.FixedLenFeature([], tf.string),
        },
        reader_cls=tf.data.TFRecordDataset,
    )
    task = _task("seqio_api_tfexample", vocab, [seqio.preprocessors.tokenize], source=source)
    first = next(iter(task.get_dataset("train", shuffle=False)))
    assert first["inputs_pretokenized"].startswith("The film is all a little Lit Crit 101")
    assert first["targets_pretokenized"] == "fresh"
