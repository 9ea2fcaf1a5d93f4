"""A prepared TFDS directory in a bucket reads as it does from disk, in both file formats
(TFRecord streamed from the store, ArrayRecord copied once into the staging folder)."""

import pytest

from t5forge import storage
from t5forge.data.sources.tfds import TfdsDataSource
from tests.data.tf_reference import FIXTURES, FORMATS


@pytest.mark.parametrize("file_format", FORMATS)
def test_tfds_directory_in_a_bucket_reads_as_from_disk(bucket, file_format, tmp_path, monkeypatch):
    monkeypatch.setenv("T5FORGE_STAGING_DIR", str(tmp_path / "staging"))
    local = FIXTURES / file_format
    for path in (local / "glue" / "sst2" / "2.0.0").iterdir():
        if path.is_file():
            storage.copy(path, f"{bucket}/tfds/{path.relative_to(local)}")
    remote = TfdsDataSource(
        "glue/sst2:2.0.0", tfds_data_dir=f"{bucket}/tfds", splits=["validation"]
    )
    on_disk = TfdsDataSource("glue/sst2:2.0.0", tfds_data_dir=str(local), splits=["validation"])
    assert remote.num_input_examples("validation") == 24
    ours = [(x["idx"], x["sentence"], x["label"]) for x in remote.split("validation")]
    assert ours == [(x["idx"], x["sentence"], x["label"]) for x in on_disk.split("validation")]


@pytest.mark.parametrize("whole_file_limit", [64 << 20, 1024])
def test_the_data_fingerprint_of_a_bucket_copy_is_the_local_ones(
    bucket, tmp_path, monkeypatch, whole_file_limit
):
    """Names without folders, sizes and CRCs, read from the store (whole, and with the
    whole-file limit lowered so the shards are known by their ends, read by seeking)."""
    from t5forge.data import ByteVocabulary, Feature, Task, preprocessors
    from t5forge.run import output_identity

    monkeypatch.setattr(output_identity, "_WHOLE_FILE_LIMIT", whole_file_limit)
    monkeypatch.setattr(output_identity, "_SAMPLE", min(whole_file_limit, 1 << 20) // 4)
    local = FIXTURES / "tfrecord"
    for path in (local / "glue" / "sst2" / "2.0.0").iterdir():
        if path.is_file():
            storage.copy(path, f"{bucket}/tfds/{path.relative_to(local)}")
    fingerprints = [
        output_identity.data_fingerprint(
            [
                Task(
                    "glue_sst2_fingerprint",
                    TfdsDataSource("glue/sst2:2.0.0", tfds_data_dir=data_dir),
                    [preprocessors.tokenize],
                    {"sentence": Feature(ByteVocabulary())},
                )
            ],
            "train",
        )
        for data_dir in (f"{bucket}/tfds", str(local))
    ]
    assert fingerprints[0] == fingerprints[1]
    assert [row[0] for row in fingerprints[0]][:2] == ["dataset_info.json", "features.json"]
    assert len(fingerprints[0]) == 5
