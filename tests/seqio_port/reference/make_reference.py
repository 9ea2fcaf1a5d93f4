"""Computes, with the real seqio 0.0.20 and t5 0.9.4, what tests/seqio_port/test_t5_reference.py
compares t5forge against; writes t5_reference.json beside this file.

Run in a side environment with TensorFlow, tensorflow_datasets, seqio and t5 installed
(never a dependency of t5forge), from the repository root:

    /tmp/side-tf/bin/python tests/seqio_port/reference/make_reference.py

1. Tasks over the TFDS fixtures (tests/data/tfds_fixtures, written by TFDS's own builders):
   every T5 task t5forge registers whose dataset the fixtures hold, its source pointed at the
   fixture directory, and the vocabulary at SeqIO's 26-piece test model (/work/shared/data/vocab, $T5FORGE_SHARED_DATA/vocab), 100
   extra ids; the first 20 examples of every split (all, where the fixture holds fewer),
   unshuffled: text after preprocessing and ids. SeqIO reads TFRecord only (TFDS's as_dataset
   refuses ArrayRecord); where the fixtures also hold ArrayRecord, the same preprocessors run
   over the examples in the order TFDS's data_source reads them (shard after shard, where
   as_dataset interleaves blocks of 16), which is how t5forge reads ArrayRecord.
2. T5's text preprocessors on raw examples shaped as TFDS gives them (the GLUE/SuperGLUE
   configs, SQuAD, ReCoRD, WSC, DPR, summaries), through tf.data.
3. T5's postprocessors and metrics on small inputs.
4. Runs of one character or string ("slowwwwwwwwly", "----------"), whose equal-scoring
   segmentations T5 breaks by tensorflow-text's rounding, as raw examples through the README's
   de->en task, wmt_t2t_ende_v003 and glue_sst2_v002 with the vocabulary `t5forge demo` trains
   (demo_spiece.model beside this file; see make_tokenisation_reference.py): ids.
"""

import functools
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import seqio
import t5.data.mixtures  # noqa: F401  (registers T5's tasks)
import tensorflow as tf
import tensorflow_datasets as tfds
from t5.data import glue_utils, postprocessors, preprocessors
from t5.evaluation import metrics

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
FIXTURES = REPO / "tests" / "data" / "tfds_fixtures" / "tfrecord"
ARRAY_RECORD_FIXTURES = FIXTURES.parent / "array_record"
SHARED = Path(os.environ.get("T5FORGE_SHARED_DATA", "/work/shared/data"))
VOCAB = seqio.SentencePieceVocabulary(str(SHARED / "vocab" / "sentencepiece.model"), 100)
LENGTHS = {"inputs": 24, "targets": 12}
FIRST_EXAMPLES = 20


def as_json(value):
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return [as_json(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value


# ---------------------------------------------------------------- 1. tasks over fixtures

USER_TASK = "wmt_t2t_de_en_v003"  # the T5X README's tasks.py, as written there
seqio.TaskRegistry.add(
    USER_TASK,
    source=seqio.TfdsDataSource(tfds_name="wmt_t2t_translate/de-en:1.0.0"),
    preprocessors=[
        functools.partial(preprocessors.translate, source_language="de", target_language="en"),
        seqio.preprocessors.tokenize,
        seqio.CacheDatasetPlaceholder(),
        seqio.preprocessors.append_eos_after_trim,
    ],
    metric_fns=[metrics.bleu],
    output_features={
        "inputs": seqio.Feature(vocabulary=t5.data.get_default_vocabulary()),
        "targets": seqio.Feature(vocabulary=t5.data.get_default_vocabulary()),
    },
)

# XSum as google-research/transformer_modifications registers it (T5's vocabulary here).
seqio.TaskRegistry.add(
    "xsum_v110",
    source=seqio.TfdsDataSource(tfds_name="xsum:1.1.0"),
    preprocessors=[
        functools.partial(preprocessors.summarize, article_key="document", summary_key="summary"),
        seqio.preprocessors.tokenize,
        seqio.CacheDatasetPlaceholder(),
        seqio.preprocessors.append_eos_after_trim,
    ],
    metric_fns=[metrics.rouge],
    output_features=t5.data.tasks.DEFAULT_OUTPUT_FEATURES,
)

# Every task t5forge registers from T5's registry whose TFDS data the fixtures hold (the random
# c4 objectives aside: TensorFlow's stateless draws are not t5forge's), plus the README's task.
# task -> (the fixture's tfds_name, splits read, examples taken per split)
REGISTERED = [
    "cnn_dailymail_v002",
    "dpr_v001_simple",
    "squad_v010",
    "squad_v010_allanswers",
    "squad_v010_context_free",
    "super_glue_wsc_v102_simple_eval",
    "super_glue_wsc_v102_simple_train",
    "wmt14_ende_v003",
    "wmt14_enfr_v003",
    "wmt15_enfr_v003",
    "wmt16_enro_v003",
    "wmt19_ende_v003",
    "wmt_t2t_ende_v003",
    "xsum_v110",
    *(f"glue_{c}_v002" for c in tfds.text.glue.Glue.builder_configs),
    *(
        f"super_glue_{c}_v102"
        for c in tfds.text.super_glue.SuperGlue.builder_configs
        if "wsc" not in c
    ),
    *glue_utils.get_super_glue_weight_mapping_sentinel(),
]
TASKS = {
    USER_TASK: ("wmt_t2t_translate/de-en:1.0.0", ["validation"], FIRST_EXAMPLES),
    # sst2 is also written at TFDS's current version, in both file formats
    "glue_sst2_v002@2.0.0": ("glue/sst2:2.0.0", ["validation", "test"], FIRST_EXAMPLES),
}


def fixture_tasks():
    for name in REGISTERED:
        task = seqio.TaskRegistry.get(name)
        tfds_name = task.source.tfds_dataset.name
        dataset, _, version = tfds_name.partition(":")
        info = FIXTURES / dataset / version / "dataset_info.json"
        if info.is_file():
            written = [split["name"] for split in json.loads(info.read_text())["splits"]]
            splits = [split for split in written if split in (task.source._splits or written)]
            TASKS[name] = (tfds_name, splits, FIRST_EXAMPLES)


def output_features(task, vocabulary):
    return {
        key: seqio.Feature(vocabulary, add_eos=f.add_eos, required=f.required)
        for key, f in task.output_features.items()
    }


def through_task(task, columns, lengths, vocabulary):
    """The task's preprocessors over in-memory examples (a dict of columns), unshuffled."""
    on_columns = seqio.Task(
        f"{task.name}_on_columns",
        source=seqio.FunctionDataSource(
            lambda split, shuffle_files: tf.data.Dataset.from_tensor_slices(columns),
            splits=["any"],
        ),
        preprocessors=task.preprocessors,
        output_features=output_features(task, vocabulary),
    )
    ds = on_columns.get_dataset(lengths, split="any", shuffle=False, use_cached=False)
    return [as_json(ex) for ex in ds.as_numpy_iterator()]


def array_record_examples(task, tfds_name, split, count):
    """The split's first examples as TFDS's data_source reads the ArrayRecord fixture."""
    dataset, _, version = tfds_name.partition(":")
    builder = tfds.builder_from_directory(str(ARRAY_RECORD_FIXTURES / dataset / version))
    source = builder.as_data_source(split)
    raws = [source[i] for i in range(min(count, len(source)))]
    columns = {key: [raw[key] for raw in raws] for key in raws[0]}
    return through_task(task, columns, LENGTHS, VOCAB)


def task_examples(name, tfds_name, splits, count):
    task = seqio.TaskRegistry.get(name.partition("@")[0])
    on_fixture = seqio.Task(
        re.sub(r"\W", "_", name) + "_on_fixture",
        source=seqio.TfdsDataSource(tfds_name=tfds_name, tfds_data_dir=str(FIXTURES)),
        preprocessors=task.preprocessors,
        output_features=output_features(task, VOCAB),
    )
    out = {}
    for split in splits:
        ds = on_fixture.get_dataset(LENGTHS, split=split, shuffle=False, use_cached=False)
        out[split] = [as_json(ex) for ex in ds.take(count).as_numpy_iterator()]
    examples = {"tfds_name": tfds_name, "sequence_length": LENGTHS, "splits": out}
    dataset, _, version = tfds_name.partition(":")
    if (ARRAY_RECORD_FIXTURES / dataset / version).is_dir():
        examples["array_record_splits"] = {
            split: array_record_examples(task, tfds_name, split, count) for split in splits
        }
    return examples


# ---------------------------------------------------------------- 2. text preprocessors

GLUE = tfds.text.glue.Glue.builder_configs
SUPER_GLUE = tfds.text.super_glue.SuperGlue.builder_configs
RAW = {
    "cola": {"sentence": b"The more we study verbs, the crazier they get.", "label": 1, "idx": 3},
    "mrpc": {"sentence1": b'He said: "no".', "sentence2": b"He refused.", "label": 0, "idx": 7},
    "stsb": {
        "sentence1": b"A man plays.",
        "sentence2": b"A man is playing.",
        "label": 3.7,
        "idx": 1,
    },
    "stsb_half": {"sentence1": b"a", "sentence2": b"b", "label": 4.5, "idx": 2},
    "mnli": {"premise": b"Cats sleep.", "hypothesis": b"Cats rest.", "label": 0, "idx": 9},
    "ax": {"premise": b"No one came.", "hypothesis": b"Someone came.", "label": -1, "idx": 0},
    "qnli": {"question": b"Who?", "sentence": b"Nobody.", "label": 1, "idx": 4},
    "boolq": {"question": b"is it blue", "passage": b"The sky is blue.", "label": 1, "idx": 5},
    "cb": {"premise": b"It rained.", "hypothesis": b"It was dry.", "label": 1, "idx": 6},
    "copa": {
        "premise": b"The man fell.",
        "choice1": b"He slipped.",
        "choice2": b"He flew.",
        "question": b"cause",
        "label": 0,
        "idx": 8,
    },
    "multirc": {
        "paragraph": b"<b>Sent 1: </b>Tom ran.<br><b>Sent 2: </b>He won.<br>",
        "question": b"Who won?",
        "answer": b"Tom",
        "label": 1,
        "idx": {"paragraph": 0, "question": 1, "answer": 2},
    },
    "wic": {
        "sentence1": b"Bank of the river.",
        "sentence2": b"The bank closed.",
        "word": b"bank",
        "start1": 0,
        "start2": 4,
        "end1": 4,
        "end2": 8,
        "label": 0,
        "idx": 10,
    },
    "axb": {"sentence1": b"All dogs bark.", "sentence2": b"Some dogs bark.", "label": 0, "idx": 11},
    "wsc.fixed": {
        "text": b"Mark told Pete many lies about himself, which Pete included in his book.",
        "span1_text": b"Mark",
        "span1_index": 0,
        "span2_text": b"He",
        "span2_index": 13,
        "label": 0,
        "idx": 12,
    },
    "record": {
        "passage": b"Tom met Ann.\n@highlight\nThey talked\n@highlight\nAnn left!\n@highlight\nEnd",
        "query": b"@placeholder left first.",
        "entities": [b"Tom", b"Ann"],
        "answers": [b"Ann", b"Ann"],
        "idx": {"passage": 3, "query": 4},
    },
}
# wsc.fixed's span2 must be the pronoun at that index for wsc_simple.
RAW["wsc.fixed"]["span2_text"], RAW["wsc.fixed"]["span2_index"] = b"his", 11
SQUAD = {
    "id": b"q1",
    "title": b"T",
    "context": b"The cat (Felis catus) sat, quietly; on the mat.",
    "question": b"Where did the cat sit?",
    "answers": {"text": [b"on the mat.", b"the mat"], "answer_start": [34, 37]},
}
DPR = {
    "sentence": b"Bob asked Tom if he could lend some money.",
    "pronoun": b"he",
    "candidates": [b"Bob", b"Tom"],
    "label": 1,
}
CNN = {"article": b"Markets rose today . Investors cheered .", "highlights": b"Markets rose ."}


def glue_step(config_name):
    config = GLUE.get(config_name) or SUPER_GLUE[config_name]
    return glue_utils.get_glue_text_preprocessor(config)


def run_step(step, raw):
    ds = tf.data.Dataset.from_tensors(raw)
    return [as_json(ex) for ex in step(ds).as_numpy_iterator()]


def text_preprocessors():
    cases = {}
    for name in ("cola", "mrpc", "stsb", "mnli", "ax", "qnli"):
        raw = RAW[name]
        cases[f"glue/{name}"] = (raw, run_step(glue_step(name), raw))
    cases["glue/stsb_half"] = (RAW["stsb_half"], run_step(glue_step("stsb"), RAW["stsb_half"]))
    for name in ("boolq", "cb", "copa", "multirc", "wic", "wsc.fixed", "record"):
        raw = RAW[name]
        cases[f"super_glue/{name}"] = (raw, run_step(glue_step(name), raw))
    rekeyed = functools.partial(
        preprocessors.rekey,
        key_map={"premise": "sentence1", "hypothesis": "sentence2", "label": "label", "idx": "idx"},
    )
    cases["super_glue/axb"] = (
        RAW["axb"],
        run_step(lambda ds: glue_step("axb")(rekeyed(ds)), RAW["axb"]),
    )
    cases["squad"] = (SQUAD, run_step(preprocessors.squad, SQUAD))
    cases["squad_context_free"] = (
        SQUAD,
        run_step(functools.partial(preprocessors.squad, include_context=False), SQUAD),
    )
    cases["dpr_simple"] = (DPR, run_step(preprocessors.definite_pronoun_resolution_simple, DPR))
    for only in (False, True):
        step = functools.partial(preprocessors.wsc_simple, correct_referent_only=only)
        cases[f"wsc_simple/{only}"] = (RAW["wsc.fixed"], run_step(step, RAW["wsc.fixed"]))
    cases["summarize"] = (
        CNN,
        run_step(
            functools.partial(
                preprocessors.summarize, article_key="article", summary_key="highlights"
            ),
            CNN,
        ),
    )
    for source, target in (("en", "de"), ("en", "fr"), ("en", "ro"), ("de", "en")):
        raw = {source: b"Hello, world.", target: b"Hallo, Welt."}
        step = functools.partial(
            preprocessors.translate, source_language=source, target_language=target
        )
        cases[f"translate/{source}-{target}"] = (raw, run_step(step, raw))
    return {name: {"raw": as_json(raw), "outputs": out} for name, (raw, out) in cases.items()}


# ---------------------------------------------------------------- 3. postprocessors, metrics


def metric_cases():
    texts_t = ["the cat sat on the mat .", "a quick brown fox", "hello there"]
    texts_p = ["the cat sat on a mat .", "the quick brown fox jumps", "hello"]
    labels_t, labels_p = [0, 1, 1, 0, 1, 1, 0], [0, 1, 0, 0, 1, 2, 1]
    multiclass_t, multiclass_p = [0, 1, 2, 2, 1, 0], [0, 2, 2, 2, 1, 1]
    floats_t, floats_p = [1.0, 2.5, 3.0, 4.2, 0.4], [1.2, 2.0, 3.6, 4.0, 1.0]
    multirc_t = [{"value": v, "group": g} for v, g in [(1, 0), (0, 0), (1, 1), (1, 2), (0, 2)]]
    multirc_p = [{"value": v} for v in (1, 0, 0, 1, 1)]
    record_t = [
        {"value": ["Ann", "ann"], "group": (3, 4)},
        {"value": ["Ann", "ann"], "group": (3, 4)},
        {"value": ["Tom"], "group": (5, 6)},
    ]
    record_p = [{"value": "Ann"}, {"value": "x"}, {"value": "Tom Smith"}]
    squad_t = [["on the mat", "the mat"], ["Paris"], ["1,000 people"]]
    squad_p = ["the mat.", "paris France", "a thousand"]
    np.random.seed(0)
    rouge = metrics.rouge(texts_t, texts_p)
    cases = {
        "bleu": (texts_t, texts_p, metrics.bleu(texts_t, texts_p)),
        "bleu_streams": (
            [texts_t, texts_p],
            texts_p,
            metrics.bleu([texts_t, texts_p], texts_p),
        ),
        "rouge_seed0": (texts_t, texts_p, rouge),
        "squad": (squad_t, squad_p, metrics.squad(squad_t, squad_p)),
        "trivia_qa": (squad_t, squad_p, metrics.trivia_qa(squad_t, squad_p)),
        "accuracy": (labels_t, labels_p, metrics.accuracy(labels_t, labels_p)),
        "sequence_accuracy": (texts_t, texts_p, metrics.sequence_accuracy(texts_t, texts_p)),
        "f1_score_with_invalid": (
            labels_t,
            labels_p,
            metrics.f1_score_with_invalid(labels_t, labels_p),
        ),
        "mean_3class_f1": (
            multiclass_t,
            multiclass_p,
            metrics.mean_multiclass_f1(num_classes=3)(multiclass_t, multiclass_p),
        ),
        "matthews_corrcoef": (
            labels_t,
            labels_p,
            glue_utils.get_glue_metric("cola")[0](labels_t, labels_p),
        ),
        "pearson_corrcoef": (floats_t, floats_p, metrics.pearson_corrcoef(floats_t, floats_p)),
        "spearman_corrcoef": (floats_t, floats_p, metrics.spearman_corrcoef(floats_t, floats_p)),
        "multirc_f1": (
            multirc_t,
            multirc_p,
            metrics.multirc_f1_over_all_answers(multirc_t, multirc_p),
        ),
        "multirc_exact_match": (
            multirc_t,
            multirc_p,
            metrics.mean_group_metric(metrics.all_match)(multirc_t, multirc_p),
        ),
        "record": (
            record_t,
            record_p,
            metrics.deduplicate_metric(metrics.squad)(record_t, record_p),
        ),
    }
    return {
        k: {"targets": as_json(t), "predictions": as_json(p), "value": as_json(v)}
        for k, (t, p, v) in cases.items()
    }


def postprocessor_cases():
    sst2 = glue_utils.get_glue_postprocess_fn(GLUE["sst2"])
    example = {
        "idx/question": 4,
        "idx/passage": 1,
        "idx/query": 2,
        "answers": [b"Ann", b"ann"],
        "targets_pretokenized": b"the red Ball",
        "label": 1,
    }
    calls = [
        ("sst2", "positive", False, sst2("positive", example=example, is_target=False)),
        ("sst2", "neutral", False, sst2("neutral", example=example, is_target=False)),
        ("stsb", "3.4", False, postprocessors.string_to_float("3.4")),
        ("stsb", "high", False, postprocessors.string_to_float("high")),
        ("multirc", "True", True, postprocessors.multirc("True", example=example, is_target=True)),
        ("record", "Ann", True, postprocessors.record("Ann", example=example, is_target=True)),
        ("qa", "x", True, postprocessors.qa("x", example=example, is_target=True)),
        ("wsc_simple", "a ball", False, postprocessors.wsc_simple("a ball", example=example)),
        ("wsc_simple", "Ball's", False, postprocessors.wsc_simple("Ball's", example=example)),
        ("wsc_simple", "the", False, postprocessors.wsc_simple("the", example=example)),
    ]
    return {
        "example": as_json(example),
        "calls": [
            [name, text, is_target, as_json(value)] for name, text, is_target, value in calls
        ],
    }


def sentinel_postprocessor_cases():
    """add_task_with_sentinels's postprocessor: the decoded sentinel stripped, then boolq's."""
    boolq = seqio.TaskRegistry.get("super_glue_boolq_v102")
    seqio.TaskRegistry.add(
        "boolq_fixture_vocabulary",
        source=boolq.source,
        preprocessors=boolq.preprocessors,
        output_features={"inputs": seqio.Feature(VOCAB), "targets": seqio.Feature(VOCAB)},
        postprocess_fn=boolq.postprocessor,
    )
    seqio.experimental.add_task_with_sentinels("boolq_fixture_vocabulary", num_sentinels=1)
    task = seqio.TaskRegistry.get("boolq_fixture_vocabulary_1_sentinel")
    sentinel = VOCAB.decode([VOCAB.vocab_size - 1])
    texts = [f"{sentinel} True", f"{sentinel}False", "True", f"x {sentinel} True", sentinel]
    return [
        [text, as_json(task.postprocessor(text, example={}, is_target=False))] for text in texts
    ]


# ---------------------------------------------------------------- 4. runs through T5's tasks

DEMO_VOCAB = seqio.SentencePieceVocabulary(str(HERE / "demo_spiece.model"), 100)
RUN_LENGTHS = {"inputs": 64, "targets": 64}
RUNS = [c * n for c in "-.!=0ow" for n in (3, 5, 8, 10, 13, 16)] + [
    "slowwwwwwwwly",
    "sooooo goooood!!!",
    "00:00:00:00:00",
    "MCMXCIX, not IIII",
    "hmmmmmm.... wait????",
]
# task -> a raw example as TFDS gives it, for a run and its index
RUN_EXAMPLES = {
    USER_TASK: lambda run, i: {"de": f"Er ging {run}", "en": f"He went {run}"},
    "wmt_t2t_ende_v003": lambda run, i: {"de": f"Er ging {run}", "en": f"He went {run}"},
    "glue_sst2_v002": lambda run, i: {"sentence": f"it was {run}", "label": i % 2, "idx": i},
}


def run_examples(name: str, make_raw) -> dict:
    raws = [make_raw(run, i) for i, run in enumerate(RUNS)]
    columns = {key: [raw[key] for raw in raws] for key in raws[0]}
    task = seqio.TaskRegistry.get(name)
    return {
        "raw": raws,
        "sequence_length": RUN_LENGTHS,
        "examples": through_task(task, columns, RUN_LENGTHS, DEMO_VOCAB),
    }


def main():
    fixture_tasks()
    reference = {
        "made_with": {"seqio": seqio.__version__, "t5": "0.9.4", "tensorflow": tf.__version__},
        "tasks": {name: task_examples(name, *spec) for name, spec in TASKS.items()},
        "text_preprocessors": text_preprocessors(),
        "metrics": metric_cases(),
        "postprocessors": postprocessor_cases(),
        "sentinel_postprocessor": sentinel_postprocessor_cases(),
        "runs": {name: run_examples(name, make_raw) for name, make_raw in RUN_EXAMPLES.items()},
    }
    path = HERE / "t5_reference.json"
    path.write_text(json.dumps(reference, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
