"""A prepared TFDS directory in a bucket reads as it does from disk, in both file formats
(TFRecord streamed from the store, ArrayRecord copied once into the staging folder)."""

import pytest

from t5forge import storage
from t5forge.data.tfds import TfdsDataSource
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
