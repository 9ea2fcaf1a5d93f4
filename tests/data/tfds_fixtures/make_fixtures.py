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
It also writes, TFRecord only, the datasets T5's task registry reads (T5_DATASETS: GLUE,
SuperGLUE, DPR, C4, CNN/DailyMail, SQuAD, XSum, WMT) with TFDS's own builder classes
(their features, configs and split names) and a few generated examples each.
It writes each of those three datasets' features.json in the forms TFDS before 4.6 used
(legacy_features/), checked by TFDS's own from_json.
Then it records what TFDS itself reads back (`as_dataset` + `as_numpy` on the TFRecord copy,
`as_data_source` on the ArrayRecord copy, slices, per-host reads) in reference.json, and
writes tfexample/*.tfrecord with tf.io.TFRecordWriter and what SeqIO's TFExampleDataSource
reads from them in tfexample_reference.json.
"""

import base64
import copy
import gzip
import json
import os
import shutil
import sys

import numpy as np
import seqio
import tensorflow as tf
import tensorflow_datasets as tfds
from google.protobuf import json_format

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

# The datasets of T5 0.9.4's task registry (t5/data/tasks.py names and versions), written
# by TFDS's own builder classes (their features, configs and split names) with a few
# generated examples each, TFRecord only (what seqio + t5 read; their parity fixtures are
# computed over these).
_TEST, _TRAIN_VALID_TEST = ("test",), ("train", "validation", "test")
T5_DATASETS = {
    **{f"glue/{c}:1.0.0": _TRAIN_VALID_TEST for c in ("cola", "sst2", "mrpc", "qqp", "stsb")},
    **{f"glue/{c}:1.0.0": _TRAIN_VALID_TEST for c in ("qnli", "rte", "wnli")},
    "glue/mnli:1.0.0": (
        "train",
        "validation_matched",
        "validation_mismatched",
        "test_matched",
        "test_mismatched",
    ),
    "glue/ax:1.0.0": _TEST,
    **{
        f"super_glue/{c}:1.0.2": _TRAIN_VALID_TEST
        for c in ("boolq", "cb", "copa", "multirc", "record", "rte", "wic", "wsc.fixed")
    },
    "super_glue/axb:1.0.2": _TEST,
    "super_glue/axg:1.0.2": _TEST,
    "definite_pronoun_resolution:1.1.0": ("train", "test"),
    "c4/en:2.2.0": ("train", "validation"),
    "cnn_dailymail:3.4.0": _TRAIN_VALID_TEST,
    "squad/v1.1:3.0.0": ("train", "validation"),
    "xsum:1.1.0": _TRAIN_VALID_TEST,
    "wmt14_translate/de-en:1.0.0": _TRAIN_VALID_TEST,
    "wmt14_translate/fr-en:1.0.0": _TRAIN_VALID_TEST,
    "wmt15_translate/fr-en:1.0.0": _TRAIN_VALID_TEST,
    "wmt16_translate/ro-en:1.0.0": _TRAIN_VALID_TEST,
    "wmt19_translate/de-en:1.0.0": ("train", "validation"),
}
T5_EXAMPLES_PER_SPLIT = 6


class Texts:
    """Real sentences for generated examples: reviews for English, LibreOffice help for
    German (and, marked as such, for the other languages a translation feature names)."""

    def __init__(self):
        self.reviews = [r["text"] for r in read_jsonl("rotten_tomatoes", "test", 200)]
        self.pairs = read_jsonl("en_de_lohelp", "test", 200)

    def text(self, i, language="en"):
        if language == "en":
            return self.reviews[i % len(self.reviews)]
        return self.pairs[i % len(self.pairs)]["de"]

    def pair(self, i, language):
        row = self.pairs[i % len(self.pairs)]
        return row["en"] if language == "en" else row["de"]


def synthesize(feature, i, split, texts, name=""):
    """An example of a TFDS feature, value by value from its kind (ClassLabel -1 in test
    splits, as GLUE's and SuperGLUE's test labels are)."""
    f = tfds.features
    if isinstance(feature, f.Translation):
        return {lang: texts.pair(i, lang) for lang in feature.languages}
    if isinstance(feature, f.TranslationVariableLanguages):
        return {lang: texts.pair(i, lang) for lang in feature.languages}
    if isinstance(feature, f.FeaturesDict):
        return {
            key: synthesize(sub, i + k, split, texts, key)
            for k, (key, sub) in enumerate(feature.items())
        }
    if isinstance(feature, f.Sequence):
        length = feature._length or 1 + i % 3  # noqa: SLF001 - TFDS keeps a fixed length there
        return [synthesize(feature.feature, i + j, split, texts, name) for j in range(length)]
    if isinstance(feature, f.ClassLabel):
        return -1 if split.startswith("test") else i % feature.num_classes
    if isinstance(feature, f.Text):
        return texts.text(i)
    dtype = np.dtype(feature.np_dtype)
    if dtype.kind in "OSU":
        return texts.text(i)
    if dtype.kind == "b":
        return bool(i % 2)
    if dtype.kind == "f":
        return i / 4.0
    return i % 3 if name.endswith("_index") else i


def consistent_spans(example):
    """WSC's span indices and texts point at the words of its text, as T5's wsc preprocessors
    expect."""
    if {"text", "span1_index", "span2_index", "span1_text", "span2_text"} <= example.keys():
        words = example["text"].split()
        example["span1_index"], example["span2_index"] = 0, min(2, len(words) - 1)
        example["span1_text"] = words[example["span1_index"]]
        example["span2_text"] = words[example["span2_index"]]
    return example


def t5_builder(tfds_name, splits, texts):
    """TFDS's registered builder class for `tfds_name`, generating examples instead of
    downloading them: its own _info (features), config and split names."""
    name_and_config, version = tfds_name.split(":")
    name, _, config_name = name_and_config.partition("/")
    real = tfds.builder_cls(name)
    configs = []
    if config_name:
        config = copy.copy(next(c for c in real.BUILDER_CONFIGS if c.name == config_name))
        object.__setattr__(config, "version", tfds.core.Version(version))
        configs = [config]

    class Fixture(real, skip_registration=True):
        VERSION = tfds.core.Version(version)
        SUPPORTED_VERSIONS = []
        BUILDER_CONFIGS = configs

        def _split_generators(self, dl_manager):
            return {split: self._fixture_examples(split) for split in splits}

        def _fixture_examples(self, split):
            for i in range(T5_EXAMPLES_PER_SPLIT):
                example = synthesize(self.info.features, 7 * i + len(split), split, texts)
                yield i, consistent_spans(example)

    Fixture.name = name
    kwargs = {"config": config_name} if config_name else {}
    return Fixture(data_dir=os.path.join(HERE, "tfrecord"), **kwargs)


def prepare_t5_datasets():
    """Each T5 registry dataset in TFRecord, and what TFDS reads back from it."""
    texts, reads = Texts(), {}
    for tfds_name, splits in T5_DATASETS.items():
        builder = t5_builder(tfds_name, splits, texts)
        shutil.rmtree(builder.data_dir, ignore_errors=True)
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=2))
        reader = tfds.builder_from_directory(builder.data_dir)
        reads[tfds_name] = {
            "tfrecord": {
                "splits": {
                    split: [
                        tagged(x)
                        for x in tfds.as_numpy(reader.as_dataset(split=split, shuffle_files=False))
                    ]
                    for split in splits
                }
            }
        }
    return reads


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


_TENSOR = "tensorflow_datasets.core.features.tensor_feature.Tensor"
_SCALAR = "tensorflow_datasets.core.features.scalar.Scalar"


def legacy_form(node):
    """A features.json node in the form TFDS before 4.6 wrote ({"type", "content"})."""
    kind = node["pythonClassName"].rsplit(".", 1)[-1]
    if kind == "FeaturesDict":
        content = {k: legacy_form(v) for k, v in node["featuresDict"]["features"].items()}
    elif kind == "ClassLabel":
        content = {"num_classes": int(node["classLabel"]["numClasses"])}
    elif kind in ("Tensor", "Scalar"):  # Scalar came later: a scalar was a Tensor of shape ()
        node = {**node, "pythonClassName": _TENSOR}
        tensor = node["tensor"]
        dimensions = [int(d) for d in tensor["shape"].get("dimensions", [])]
        content = {
            "shape": [None if d == -1 else d for d in dimensions],
            "dtype": tensor["dtype"],
            "encoding": tensor["encoding"],
        }
    elif kind == "Sequence":
        length = int(node["sequence"].get("length", -1))
        content = {
            "feature": legacy_form(node["sequence"]["feature"]),
            "length": None if length == -1 else length,
        }
    elif kind in ("Translation", "TranslationVariableLanguages"):
        content = {"languages": node["translation"]["languages"]}
    else:
        content = {}
    return {"type": node["pythonClassName"], "content": content}


def write_legacy_features():
    """Each two-format dataset's features.json in the two older forms: TFDS's own to_json()
    ({"type", "content", "proto_cls"}, TFDS 4.5) and the one before it, checked by TFDS's
    from_json, which reads both back as exactly today's features."""
    folder = os.path.join(HERE, "legacy_features")
    os.makedirs(folder, exist_ok=True)
    for builder_cls in BUILDERS:
        config = builder_cls.BUILDER_CONFIGS[0].name
        version = str(builder_cls.VERSION)
        version_dir = os.path.join(HERE, "tfrecord", builder_cls.name, config, version)
        with open(os.path.join(version_dir, "features.json")) as f:
            current = json.load(f)
        features = tfds.features.FeatureConnector.from_json(current)
        forms = {"proto_cls": features.to_json(), "type_content": legacy_form(current)}
        for form, legacy in forms.items():
            read_back = tfds.features.FeatureConnector.from_json(copy.deepcopy(legacy)).to_proto()
            expected = current
            if form == "type_content":
                expected = json.loads(json.dumps(current).replace(_SCALAR, _TENSOR))
            assert json_format.MessageToDict(read_back) == expected, (builder_cls.name, form)
            with open(os.path.join(folder, f"{builder_cls.name}.{form}.json"), "w") as f:
                json.dump(legacy, f, indent=1, sort_keys=True)


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
    write_legacy_features()
    reference.update(prepare_t5_datasets())
    for file_format in FORMATS:  # TFDS's empty download folders
        shutil.rmtree(os.path.join(HERE, file_format, "downloads"), ignore_errors=True)
    with open(os.path.join(HERE, "reference.json"), "w") as f:
        json.dump(reference, f, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    with open(os.path.join(HERE, "tfexample_reference.json"), "w") as f:
        json.dump(write_tfexamples(), f, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    print(f"TFDS {tfds.__version__}, TensorFlow {tf.__version__}, seqio {seqio.__version__}")


if __name__ == "__main__":
    sys.exit(main())
