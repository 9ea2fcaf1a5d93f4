"""TfdsDataSource reads the TFDS directories that TFDS's own builder wrote, in both file
formats, and gives what TFDS itself reads back from them: whole splits in TFDS's order,
slices, per-host shards (references in tfds_fixtures/reference.json)."""

import pickle
import shutil

import pytest

from t5forge.data import ByteVocabulary, Feature, Task, preprocessors
from t5forge.data.sources.shard_info import ShardInfo
from t5forge.data.sources.tfds import TfdsDataSource, set_tfds_data_dir_override
from t5forge.data.sources.tfds.reading import RandomAccessSplit, StreamingSplit
from t5forge.errors import DataError
from tests.data.tf_reference import FIXTURES, FORMATS, assert_all_same, load_reference, untag

REFERENCE = load_reference("reference.json")
# Written in both formats with slices and per-host reads; the rest are T5's registry datasets.
DATASETS = sorted(name for name in REFERENCE if "array_record" in REFERENCE[name])
READS = [(name, f) for name in sorted(REFERENCE) for f in FORMATS if f in REFERENCE[name]]


@pytest.fixture(scope="module")
def reference():
    return {
        (name, file_format): {
            split: [untag(x) for x in examples]
            for split, examples in REFERENCE[name][file_format]["splits"].items()
        }
        for name, file_format in READS
    }


def source(name, file_format, **kwargs):
    return TfdsDataSource(name, tfds_data_dir=str(FIXTURES / file_format), **kwargs)


@pytest.mark.parametrize(("name", "file_format"), READS)
def test_splits_decode_to_what_tfds_reads(name, file_format, reference):
    tfds = source(name, file_format)
    expected = reference[name, file_format]
    assert sorted(tfds.splits) == sorted(expected)
    for split, examples in expected.items():
        data = tfds.split(split)
        assert tfds.num_input_examples(split) == len(examples)
        assert_all_same(list(data), examples, f"{name} {file_format} {split}")


@pytest.mark.parametrize("file_format", FORMATS)
@pytest.mark.parametrize("name", DATASETS)
def test_slices_are_the_examples_tfds_slices(name, file_format, reference):
    slices = REFERENCE[name][file_format]["slices"]
    tfds = source(name, file_format, splits={spec: spec for spec in slices})
    for spec, positions in slices.items():
        expected = [reference[name, file_format][split][index] for split, index in positions]
        assert tfds.num_input_examples(spec) == len(expected)
        assert_all_same(list(tfds.split(spec)), expected, f"{name} {file_format} {spec}")


@pytest.mark.parametrize("name", DATASETS)
def test_each_host_reads_the_shard_files_tfds_gives_it(name, reference):
    ((split, hosts),) = REFERENCE[name]["tfrecord"]["hosts"].items()
    tfds = source(name, "tfrecord")
    for host, positions in hosts.items():
        index, num_hosts = (int(n) for n in host.split(" of "))
        ours = tfds.get_dataset(split, shuffle=False, shard_info=ShardInfo(index, num_hosts))
        expected = [reference[name, "tfrecord"][s][i] for s, i in positions]
        assert_all_same(list(ours), expected, f"{name} {split} host {host}")
    with pytest.raises(DataError, match="fewer than the 4 hosts"):
        tfds.get_dataset(split, shard_info=ShardInfo(0, 4))


def test_values_have_tfds_types_with_text_as_str():
    example = source("t5forge_feature_kinds/default:1.0.0", "tfrecord").split("train")
    first = next(iter(example))
    assert isinstance(first["text"], str) and isinstance(first["raw"], bytes)
    assert isinstance(first["meta"]["source"], str)
    assert first["words"].dtype == object and all(isinstance(w, str) for w in first["words"])
    assert first["matrix"].shape == (2, 3) and str(first["label"].dtype) == "int64"


def test_format_decides_random_access_or_streaming_and_splits_pickle():
    streaming = source("glue/sst2", "tfrecord").split("validation")
    random_access = source("glue/sst2", "array_record").split("validation")
    assert isinstance(streaming, StreamingSplit) and isinstance(random_access, RandomAccessSplit)
    assert random_access[-1] == random_access[len(random_access) - 1]
    for data in (streaming, random_access):
        assert list(pickle.loads(pickle.dumps(data))) == list(data)


@pytest.mark.parametrize("file_format", FORMATS)
def test_a_task_shards_and_shuffles_a_tfds_split(file_format):
    task = Task(
        f"tfds_glue_{file_format}",
        source("glue/sst2:2.0.0", file_format, splits={"train": "train[:30]"}),
        preprocessors=[preprocessors.tokenize],
        output_features={"sentence": Feature(ByteVocabulary())},
    )
    hosts = [
        [
            int(x["idx"])
            for x in task.get_dataset("train", shuffle=True, seed=3, shard_index=h, num_shards=2)
        ]
        for h in range(2)
    ]
    assert sorted(hosts[0] + hosts[1]) == sorted(int(x["idx"]) for x in task.source.split("train"))
    assert len(hosts[0]) == len(hosts[1]) == 15


def test_data_dir_precedence(tmp_path, monkeypatch):
    home, env = tmp_path / "home", tmp_path / "env"
    shutil.copytree(FIXTURES / "tfrecord", home / "tensorflow_datasets")
    shutil.copytree(FIXTURES / "array_record", env)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("TFDS_DATA_DIR", raising=False)
    assert TfdsDataSource("glue/sst2").data_dir == str(home / "tensorflow_datasets")
    monkeypatch.setenv("TFDS_DATA_DIR", str(env))
    assert isinstance(TfdsDataSource("glue/sst2").split("test"), RandomAccessSplit)
    explicit = TfdsDataSource("glue/sst2", tfds_data_dir=str(home / "tensorflow_datasets"))
    assert isinstance(explicit.split("test"), StreamingSplit)
    set_tfds_data_dir_override(str(env))
    try:
        overridden = TfdsDataSource("glue/sst2", tfds_data_dir=str(home / "tensorflow_datasets"))
        assert overridden.data_dir == str(env)
    finally:
        set_tfds_data_dir_override(None)


@pytest.mark.parametrize(
    ("name", "splits", "message"),
    [
        (
            "trivia_qa/rc:1.1.0",
            None,
            r"TFDS dataset 'trivia_qa/rc:1.1.0' is not prepared in .*tfrecord/trivia_qa/rc; "
            r"prepare it with `tfds build trivia_qa/rc --data_dir=.*tfrecord`",
        ),
        ("glue/sst2:3.0.0", None, r"not prepared .*\(prepared there: 1.0.0, 2.0.0\)"),
        ("glue/sst2", {"v": "validation[:100]"}, "beyond the 24 that split 'validation' has"),
        ("glue/sst2", {"v": "dev"}, "has no split 'dev'"),
        ("glue/sst2", {"v": "train[::2]"}, "not a TFDS split slice"),
        ("not a name!", None, "is not 'name', 'name/config'"),
    ],
)
def test_bad_names_and_splits_are_one_line(name, splits, message):
    tfds = source(name, "tfrecord", splits=splits) if splits else source(name, "tfrecord")
    with pytest.raises(DataError, match=message) as error:
        tfds.num_input_examples(next(iter(splits)) if splits else "train")
    assert "\n" not in str(error.value)


def test_unused_tensorflow_arguments_are_refused():
    with pytest.raises(DataError, match="decoders"):
        TfdsDataSource("glue/sst2", decoders={"sentence": object()})
    with pytest.raises(DataError, match="TfdsSplit is not supported"):
        TfdsDataSource("glue/sst2", splits={"train": object()})
    with pytest.raises(DataError, match="not the array_record"):
        source("glue/sst2", "tfrecord", tfds_builder_kwargs={"file_format": "array_record"}).split(
            "train"
        )


def _damaged_copy(tmp_path, file_format):
    data_dir = tmp_path / file_format
    shutil.copytree(FIXTURES / file_format / "glue", data_dir / "glue")
    return data_dir, data_dir / "glue" / "sst2" / "2.0.0"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:], r"byte 0: the record data's checksum"),
        (lambda b: b[:-7], r"byte \d+: the file ends inside a record of \d+ bytes \(truncated\)"),
        (lambda b: b[:0], r"holds 0 records where dataset_info.json says \d+"),
    ],
)
def test_damaged_tfrecord_shards_are_one_line_naming_file_and_offset(tmp_path, damage, message):
    data_dir, directory = _damaged_copy(tmp_path, "tfrecord")
    shard = directory / "glue-train.tfrecord-00001-of-00003"
    shard.write_bytes(damage(shard.read_bytes()))
    with pytest.raises(DataError, match=f"{shard}.*{message}") as error:
        list(TfdsDataSource("glue/sst2", tfds_data_dir=str(data_dir)).split("train"))
    assert "\n" not in str(error.value)


def test_damaged_array_record_shard_is_one_line(tmp_path):
    data_dir, directory = _damaged_copy(tmp_path, "array_record")
    shard = directory / "glue-train.array_record-00001-of-00003"
    shard.write_bytes(shard.read_bytes()[:4000])
    with pytest.raises(DataError) as error:
        list(TfdsDataSource("glue/sst2", tfds_data_dir=str(data_dir)).split("train"))
    assert "\n" not in str(error.value) and "glue" in str(error.value)


@pytest.mark.parametrize("form", ["proto_cls", "type_content"])
@pytest.mark.parametrize("name", DATASETS)
def test_features_json_of_older_tfds_decodes_the_same(name, form, reference, tmp_path):
    """Datasets prepared before TFDS 4.6 hold features.json in an older form
    (legacy_features/, each checked by TFDS's own from_json)."""
    dataset, _, version = name.partition(":")
    shutil.copytree(FIXTURES / "tfrecord" / dataset / version, tmp_path / dataset / version)
    shutil.copy(
        FIXTURES / "legacy_features" / f"{dataset.split('/')[0]}.{form}.json",
        tmp_path / dataset / version / "features.json",
    )
    tfds = TfdsDataSource(name, tfds_data_dir=str(tmp_path))
    for split, examples in reference[name, "tfrecord"].items():
        assert_all_same(list(tfds.split(split)), examples, f"{name} {form} {split}")
