"""T5's tasks, preprocessors, postprocessors and metrics on t5forge give what the real seqio
0.0.20 + t5 0.9.4 give (tests/seqio_port/reference/t5_reference.json, made by make_reference.py
beside it in an environment with TensorFlow): the first 20 examples of every split of T5's
registered tasks over TFDS-written fixtures in both file formats (ArrayRecord, which SeqIO
cannot read, in the order TFDS's data_source reads it), text and token ids, and runs of one
character or string (ties T5 breaks its own way) through T5's tasks."""

import collections
import functools
import json
import math
from pathlib import Path

import grain
import numpy as np
import pytest
from t5x_user_dir_setup import load_user_tasks

from t5forge.compat import stand_in_modules
from t5forge.data import Feature, FunctionSource, Task, TaskRegistry
from t5forge.data.preprocessors.framework import PipelineContext
from t5forge.data.providers.with_sentinels import add_task_with_sentinels
from t5forge.data.sources.tfds import TfdsDataSource
from t5forge.seqio import SentencePieceVocabulary
from t5forge.t5.data import tfds_configs

HERE = Path(__file__).resolve().parent
REFERENCE = json.loads((HERE / "reference" / "t5_reference.json").read_text())
FIXTURES = HERE.parent / "data" / "tfds_fixtures"
GLUE_CONFIGS = {
    **tfds_configs.glue.Glue.builder_configs,
    **tfds_configs.super_glue.SuperGlue.builder_configs,
}

with stand_in_modules():
    from t5.data import glue_utils, postprocessors, preprocessors
    from t5.data import mixtures as t5_mixtures  # noqa: F401  (registers T5's tasks)
    from t5.evaluation import metrics


@pytest.fixture(scope="module")
def user_task(test_spm_path, tmp_path_factory):
    """The T5X README's tasks.py with only its vocabulary path changed, registered."""
    return load_user_tasks(tmp_path_factory.mktemp("user_dir"), test_spm_path)


def _features(task: Task, vocabulary) -> dict[str, Feature]:
    """The task's output features with another vocabulary."""
    return {
        key: Feature(vocabulary, add_eos=f.add_eos, required=f.required)
        for key, f in task.output_features.items()
    }


def _on_fixture(task: Task, tfds_name: str, file_format: str, vocabulary) -> Task:
    """The task as registered, its source at the fixture, its vocabulary the test model."""
    source = TfdsDataSource(tfds_name=tfds_name, tfds_data_dir=str(FIXTURES / file_format))
    return Task(
        f"{task.name}_on_{file_format}", source, task.preprocessors, _features(task, vocabulary)
    )


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _written(tfds_name: str) -> list[str]:
    """The file formats the fixtures hold a dataset in (every one in TFRecord)."""
    dataset, _, version = tfds_name.partition(":")
    return [f for f in ("tfrecord", "array_record") if (FIXTURES / f / dataset / version).is_dir()]


TASK_CASES = [
    (name, file_format)
    for name, expected in sorted(REFERENCE["tasks"].items())
    for file_format in _written(expected["tfds_name"])
]


@pytest.mark.parametrize("name, file_format", TASK_CASES)
def test_first_examples_equal_seqio_and_t5(name, file_format, test_spm_path, user_task):
    expected = REFERENCE["tasks"][name]
    vocabulary = SentencePieceVocabulary(str(test_spm_path), extra_ids=100)
    registered = TaskRegistry.get(name.partition("@")[0])  # name@version: another TFDS version
    task = _on_fixture(registered, expected["tfds_name"], file_format, vocabulary)
    splits = expected["splits" if file_format == "tfrecord" else "array_record_splits"]
    for split, examples in splits.items():
        ds = task.get_dataset(split, sequence_length=expected["sequence_length"], shuffle=False)
        ours = [{k: _plain(v) for k, v in ex.items()} for _, ex in zip(examples, ds)]
        assert ours == examples, f"{name} {split}"


def _listed(examples: list, split: str) -> list:
    return examples


@pytest.mark.parametrize("name", sorted(REFERENCE["runs"]))
def test_runs_through_t5_tasks_equal_seqio_and_t5(name, user_task):
    """Raw examples holding runs ("slowwwwwwwwly") through the task's own preprocessors, with
    the demo's vocabulary, where sentencepiece 0.2.3 alone breaks some ties otherwise."""
    expected = REFERENCE["runs"][name]
    vocabulary = SentencePieceVocabulary(str(HERE / "reference" / "demo_spiece.model"), 100)
    registered = TaskRegistry.get(name)
    source = FunctionSource(
        functools.partial(_listed, _as_tfds_gives(expected["raw"])), ["validation"]
    )
    task = Task(
        f"{name}_on_runs", source, registered.preprocessors, _features(registered, vocabulary)
    )
    ds = task.get_dataset("validation", sequence_length=expected["sequence_length"], shuffle=False)
    assert [{k: _plain(v) for k, v in ex.items()} for ex in ds] == expected["examples"]


@pytest.mark.parametrize("case", sorted(REFERENCE["text_preprocessors"]))
def test_text_preprocessors_equal_t5(case):
    expected = REFERENCE["text_preprocessors"][case]
    raw = _as_tfds_gives(expected["raw"])
    kind, _, config = case.partition("/")
    if kind in ("glue", "super_glue"):
        config = config.removesuffix("_half")
        steps = [glue_utils.get_glue_text_preprocessor(GLUE_CONFIGS[config])]
        if config == "axb":
            key_map = {
                "premise": "sentence1",
                "hypothesis": "sentence2",
                "label": "label",
                "idx": "idx",
            }
            steps.insert(0, preprocessors.rekey.bind(key_map=key_map))
    else:
        steps = [_T5_STEPS[case]]
    assert _run(steps, raw) == expected["outputs"]


_T5_STEPS = {
    "squad": preprocessors.squad,
    "squad_context_free": preprocessors.squad.bind(include_context=False),
    "dpr_simple": preprocessors.definite_pronoun_resolution_simple,
    "wsc_simple/False": preprocessors.wsc_simple.bind(correct_referent_only=False),
    "wsc_simple/True": preprocessors.wsc_simple.bind(correct_referent_only=True),
    "summarize": preprocessors.summarize.bind(article_key="article", summary_key="highlights"),
    **{
        f"translate/{s}-{t}": preprocessors.translate.bind(source_language=s, target_language=t)
        for s, t in (("en", "de"), ("en", "fr"), ("en", "ro"), ("de", "en"))
    },
}


def _as_tfds_gives(value):
    """Text as UTF-8 bytes, as TFDS decodes it."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, list):
        return [_as_tfds_gives(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_tfds_gives(v) for k, v in value.items()}
    return value


def _run(steps, raw):
    """The steps over one raw example, as a task pipeline runs them."""
    ds = grain.MapDataset.source([raw])
    task = Task("t5_reference_steps", None, steps, {"targets": Feature(None, required=False)})
    ctx = PipelineContext(task.name, task.output_features, None, 0, collections.Counter())
    for step in task.preprocessors:
        ds = step.apply(ds, ctx, 0)
    if isinstance(ds, grain.MapDataset):
        ds = ds.to_iter_dataset()
    return [{k: _plain(v) for k, v in ex.items() if v is not None} for ex in ds if ex is not None]


@pytest.mark.parametrize("case", sorted(REFERENCE["metrics"]))
def test_metrics_equal_t5(case):
    expected = REFERENCE["metrics"][case]
    targets, predictions = expected["targets"], expected["predictions"]
    if case in ("record",):
        targets = [{**t, "group": tuple(t["group"])} for t in targets]
    fns = {
        "rouge_seed0": metrics.rouge,
        "mean_3class_f1": metrics.mean_multiclass_f1(num_classes=3),
        "matthews_corrcoef": glue_utils.get_glue_metric("cola")[0],
        "multirc_f1": metrics.multirc_f1_over_all_answers,
        "multirc_exact_match": metrics.mean_group_metric(metrics.all_match),
        "record": metrics.deduplicate_metric(metrics.squad),
        "bleu_streams": metrics.bleu,
    }
    fn = fns.get(case) or getattr(metrics, case)
    np.random.seed(0)  # T5's ROUGE takes the mid value of a bootstrap
    value = fn(targets, predictions)
    assert set(value) == set(expected["value"])
    for key, number in expected["value"].items():
        assert math.isclose(float(value[key]), number, rel_tol=1e-9, abs_tol=1e-9), (case, key)


def test_postprocessors_equal_t5():
    reference = REFERENCE["postprocessors"]
    example = _as_tfds_gives(reference["example"])
    sst2 = glue_utils.get_glue_postprocess_fn(GLUE_CONFIGS["sst2"])
    fns = {
        "sst2": sst2,
        "stsb": postprocessors.string_to_float,
        "multirc": postprocessors.multirc,
        "record": postprocessors.record,
        "qa": postprocessors.qa,
        "wsc_simple": postprocessors.wsc_simple,
    }
    for name, text, is_target, expected in reference["calls"]:
        value = fns[name](text, example=example, is_target=is_target)
        if isinstance(value, dict) and isinstance(value.get("group"), tuple):
            value = {**value, "group": list(value["group"])}
        assert value == expected, (name, text)


def test_sentinel_task_postprocessor_equals_seqio(test_spm_path):
    vocabulary = SentencePieceVocabulary(str(test_spm_path), extra_ids=100)
    boolq = TaskRegistry.get("super_glue_boolq_v102")
    features = {"inputs": Feature(vocabulary), "targets": Feature(vocabulary)}
    TaskRegistry.remove("boolq_fixture_vocabulary")
    TaskRegistry.add(
        Task(
            "boolq_fixture_vocabulary",
            boolq.source,
            boolq.preprocessors,
            features,
            postprocess_fn=boolq.postprocess_fn,
        )
    )
    task = add_task_with_sentinels("boolq_fixture_vocabulary", num_sentinels=1)
    assert task.name == "boolq_fixture_vocabulary_1_sentinel"
    for text, expected in REFERENCE["sentinel_postprocessor"]:
        assert task.postprocess_fn(text, example={}, is_target=False) == expected, text
