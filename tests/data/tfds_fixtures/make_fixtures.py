"""Writes the TFDS and tf.Example test data with TensorFlow's and TFDS's own writers.

Run only in a side environment that has the real packages (never a t5forge dependency):

    python3.11 -m venv /tmp/side-tf
    /tmp/side-tf/bin/pip install tensorflow-cpu tensorflow-datasets seqio
    /tmp/side-tf/bin/python tests/data/tfds_fixtures/make_fixtures.py

It prepares, with TFDS's builder machinery (GeneratorBasedBuilder.download_and_prepare), in
both file formats under tfrecord/ and array_record/:
- wmt_t2t_translate/de-en:1.0.0 with TFDS's features (Translation de, en), the pairs taken
  from /work/shared/data/en_de_lohelp (LibreOffice help, MPL-2.0);
- glue/sst2:2.0.0 with TFDS's features (sentence, label, idx), sentences and verdicts from
  /work/shared/data/rotten_tomatoes (fresh -> positive; test labels -1 as GLUE's are);
- t5forge_feature_kinds/default:1.0.0, every other feature kind t5forge decodes.
Then it records what TFDS itself reads back (`as_dataset` + `as_numpy` on the TFRecord copy,
`as_data_source` on the ArrayRecord copy, slices, per-host reads) in reference.json, and
writes tfexample/*.tfrecord with tf.io.TFRecordWriter and what SeqIO's TFExampleDataSource
reads from them in tfexample_reference.json.
"""

import base64
import gzip
import json
import os
import shutil
import sys

import numpy as np
import seqio
import tensorflow as tf
import tensorflow_datasets as tfds

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("T5FORGE_SHARED_DATA", "/work/shared/data")
NUM_SHARDS = 3
FORMATS = ("tfrecord", "array_record")


def read_jsonl(name, split, count):
    with gzip.open(os.path.join(SHARED, name, f"{split}.jsonl.gz"), "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(count), f)]
    return rows


class WmtT2tTranslate(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """TFDS's wmt_t2t_translate/de-en:1.0.0 features over a few LibreOffice help pairs."""

    name = "wmt_t2t_translate"
    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="de-en", version="1.0.0")]
    SIZES = {"train": 60, "validation": 20, "test": 12}

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.Translation(languages=("de", "en")),
            supervised_keys=("de", "en"),
        )

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples(split, n) for split, n in self.SIZES.items()}

    def _generate_examples(self, split, count):
        for i, row in enumerate(read_jsonl("en_de_lohelp", split, count)):
            yield i, {"de": row["de"], "en": row["en"]}


class Glue(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """TFDS's glue/sst2:2.0.0 features over Rotten Tomatoes snippets."""

    name = "glue"
    VERSION = tfds.core.Version("2.0.0")
    BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="sst2", version="2.0.0")]
    SIZES = {"train": 60, "validation": 24, "test": 9}

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "sentence": tfds.features.Text(),
                    "label": tfds.features.ClassLabel(names=["negative", "positive"]),
                    "idx": np.int32,
                }
            ),
        )

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples(split, n) for split, n in self.SIZES.items()}

    def _generate_examples(self, split, count):
        for i, row in enumerate(read_jsonl("rotten_tomatoes", split, count)):
            label = -1 if split == "test" else int(row["label"] == "fresh")
            yield i, {"sentence": row["text"], "label": label, "idx": i}


class T5forgeFeatureKinds(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """One field per TFDS feature kind that t5forge decodes, nested ones included."""

    name = "t5forge_feature_kinds"
    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="default", version="1.0.0")]
    SIZES = {"train": 40}

    def _info(self):
        features = tfds.features
        return tfds.core.DatasetInfo(
            builder=self,
            features=features.FeaturesDict(
                {
                    "text": features.Text(),
                    "label": features.ClassLabel(names=["rotten", "fresh"]),
                    "score": features.Scalar(dtype=np.float32),
                    "flag": np.bool_,
                    "count": np.int64,
                    "raw": features.Tensor(shape=(), dtype=np.object_),
                    "matrix": features.Tensor(shape=(2, 3), dtype=np.int64),
                    "ragged": features.Tensor(shape=(None,), dtype=np.float32),
                    "words": features.Sequence(features.Text()),
                    "pairs": features.Sequence(features.Tensor(shape=(2,), dtype=np.int32)),
                    "triple": features.Sequence(np.int64, length=3),
                    "spans": features.Sequence(
                        {
                            "start": np.int32,
                            "label": features.ClassLabel(names=["short", "long"]),
                            "word": features.Text(),
                        }
                    ),
                    "meta": features.FeaturesDict(
                        {"source": features.Text(), "inner": {"weight": np.float32}}
                    ),
                    "translation": features.Translation(languages=("de", "en")),
                    "translations": features.TranslationVariableLanguages(
                        languages=["de", "en", "fr"]
                    ),
                }
            ),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(40)}

    def _generate_examples(self, count):
        reviews = read_jsonl("rotten_tomatoes", "validation", count)
        pairs = read_jsonl("en_de_lohelp", "validation", count)
        for i, (review, pair) in enumerate(zip(reviews, pairs)):
            words = review["text"].split()[: 1 + i % 5]
            variable = {"en": pair["en"]}
            if i % 2:
                variable["de"] = [pair["de"], pair["de"].upper()]
            yield (
                i,
                {
                    "text": review["text"],
                    "label": review["label"],
                    "score": len(review["text"]) / 7.0,
                    "flag": bool(i % 3),
                    "count": -(2**40) + i,
                    "raw": bytes([i, 255, 0, 128]),
                    "matrix": np.arange(6, dtype=np.int64).reshape(2, 3) * (i - 20),
                    "ragged": np.linspace(-1, 1, i % 4, dtype=np.float32),
                    "words": words,
                    "pairs": [[i, j] for j in range(i % 3)],
                    "triple": [i, i * i, -i],
                    "spans": {
                        "start": [len(w) for w in words],
                        "label": ["long" if len(w) > 4 else "short" for w in words],
                        "word": words,
                    },
                    "meta": {"source": f"review {i}", "inner": {"weight": 1.0 / (i + 1)}},
                    "translation": {"de": pair["de"], "en": pair["en"]},
                    "translations": variable,
                },
            )


BUILDERS = (WmtT2tTranslate, Glue, T5forgeFeatureKinds)


def tagged(value):
    """TFDS's numpy values as JSON that keeps their types: bytes, dtypes and shapes."""
    if isinstance(value, dict):
        return {key: tagged(v) for key, v in sorted(value.items())}
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, np.ndarray):
        flat = [tagged(v) if isinstance(v, bytes) else v for v in value.ravel().tolist()]
        return {"ndarray": flat, "dtype": str(value.dtype), "shape": list(value.shape)}
    if isinstance(value, np.generic):
        return {"scalar": value.item(), "dtype": str(value.dtype)}
    if isinstance(value, list):
        return {"list": [tagged(v) for v in value]}
    if isinstance(value, (bool, int, float, str)):
        return {"python": value, "type": type(value).__name__}
    raise TypeError(f"unexpected TFDS value {value!r}")


def prepare(builder_cls, file_format):
    data_dir = os.path.join(HERE, file_format)
    builder = builder_cls(data_dir=data_dir, file_format=file_format)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(num_shards=NUM_SHARDS)
    )
    return builder.data_dir


def positions(examples, splits_read):
    """Where each example of a slice or host read sits in the full splits: [split, index]."""
    where = {}
    for split, full in splits_read.items():
        for index, example in enumerate(full):
            where.setdefault(json.dumps(example, sort_keys=True), [split, index])
    return [where[json.dumps(example, sort_keys=True)] for example in examples]


def tfds_reads(tfrecord_dir, array_record_dir, splits):
    """What TFDS itself reads back, per format: each split in full, then each slice and each
    host's part as positions in those full reads (the values are the same ones)."""
    readers = {
        "tfrecord": lambda spec, **kwargs: tfds.as_numpy(
            tfds.builder_from_directory(tfrecord_dir).as_dataset(
                split=spec, shuffle_files=False, **kwargs
            )
        ),
        "array_record": lambda spec: tfds.builder_from_directory(array_record_dir).as_data_source(
            split=spec
        ),
    }
    reads = {}
    slices = [f"{s}[{cut}]" for s in splits for cut in ("2:9", ":90%", "-25%:")]
    slices += [f"{splits[0]}[:5]+{splits[-1]}[-3:]", f"{splits[0]}[1shard:]"]
    for file_format, read in readers.items():
        full = {split: [tagged(x) for x in read(split)] for split in splits}
        sliced = {spec: positions([tagged(x) for x in read(spec)], full) for spec in slices}
        reads[file_format] = {"splits": full, "slices": sliced}
    hosts = {}
    for host in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=host)
        examples = readers["tfrecord"](
            splits[0], read_config=tfds.ReadConfig(input_context=context)
        )
        hosts[f"{host} of 2"] = positions(
            [tagged(x) for x in examples], reads["tfrecord"]["splits"]
        )
    reads["tfrecord"]["hosts"] = {splits[0]: hosts}
    return reads


def write_tfexamples():
    """Two TFRecord files of tf.Examples (TensorFlow's writer) and what SeqIO reads from them."""
    folder = os.path.join(HERE, "tfexample")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    reviews = read_jsonl("rotten_tomatoes", "train", 40)
    for part in range(2):
        path = os.path.join(folder, f"reviews-{part:05d}-of-00002.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for i, review in enumerate(reviews[part * 20 : (part + 1) * 20]):
                feature = {
                    "inputs": tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[review["text"].encode()])
                    ),
                    "targets": tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[review["label"].encode()])
                    ),
                    "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=range(i % 4))),
                    "scores": tf.train.Feature(
                        float_list=tf.train.FloatList(value=[i / 3.0, -i / 7.0])
                    ),
                    "index": tf.train.Feature(int64_list=tf.train.Int64List(value=[part * 20 + i])),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
    description = {
        "inputs": tf.io.FixedLenFeature([], tf.string),
        "targets": tf.io.FixedLenFeature([], tf.string),
        "ids": tf.io.VarLenFeature(tf.int64),
        "scores": tf.io.FixedLenFeature([2], tf.float32),
        "index": tf.io.FixedLenFeature([], tf.int64),
        "missing": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
    }
    source = seqio.TFExampleDataSource(
        {"train": os.path.join(folder, "reviews-*.tfrecord")}, feature_description=description
    )
    examples = []
    for example in source.get_dataset("train", shuffle=False):
        example["ids"] = tf.sparse.to_dense(example["ids"])
        examples.append(tagged({k: v.numpy() for k, v in example.items()}))
    return {"seqio_train": examples}


def main():
    reference = {}
    for builder_cls in BUILDERS:
        dirs = {}
        for file_format in FORMATS:
            shutil.rmtree(os.path.join(HERE, file_format, builder_cls.name), ignore_errors=True)
            dirs[file_format] = prepare(builder_cls, file_format)
        splits = list(builder_cls.SIZES)
        name = f"{builder_cls.name}/{builder_cls.BUILDER_CONFIGS[0].name}:{builder_cls.VERSION}"
        reference[name] = tfds_reads(dirs["tfrecord"], dirs["array_record"], splits)
    with open(os.path.join(HERE, "reference.json"), "w") as f:
        json.dump(reference, f, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    with open(os.path.join(HERE, "tfexample_reference.json"), "w") as f:
        json.dump(write_tfexamples(), f, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    print(f"TFDS {tfds.__version__}, TensorFlow {tf.__version__}, seqio {seqio.__version__}")


if __name__ == "__main__":
    sys.exit(main())
