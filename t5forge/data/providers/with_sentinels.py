"""SeqIO's `experimental.add_task_with_sentinels`: a copy of a task with sentinels after its
inputs and before its targets, which helps fine-tuning span-corruption models on small data
(T5 registers a `_1_sentinel` copy of each SuperGLUE task). Written as SeqIO 0.0.20 does it:
the name rule, the trimming that keeps the sentinels, the postprocessor that strips them."""

from __future__ import annotations

import numpy as np

from t5forge.data.preprocessors import append_eos_after_trim
from t5forge.data.preprocessors.framework import ExamplePreprocessor
from t5forge.data.providers.mixture import TaskRegistry
from t5forge.data.providers.task import Task

_EVALUATION_SUFFIXES = ("_train", "_dev", "_test", "_eval", ".")


def sentinel_task_name(task_name: str, num_sentinels: int) -> str:
    """`_<n>_sentinel` before the first of SeqIO's suffixes found (in SeqIO's order), else at
    the end: super_glue_wsc_v102_simple_train -> super_glue_wsc_v102_simple_1_sentinel_train."""
    sentinel = f"_{num_sentinels}_sentinel"
    for suffix in _EVALUATION_SUFFIXES:
        index = task_name.find(suffix)
        if index >= 0:
            return task_name[:index] + sentinel + task_name[index:]
    return task_name + sentinel


def _sentinel_ids(vocabulary, num_sentinels: int) -> np.ndarray:
    return np.arange(vocabulary.vocab_size - 1, vocabulary.vocab_size - 1 - num_sentinels, -1)


class _AddSentinels:
    """The sentinels after `inputs` and before `targets`."""

    def __init__(self, num_sentinels: int):
        self.num_sentinels = num_sentinels

    def __call__(self, example, output_features):
        out = dict(example)
        inputs = _sentinel_ids(output_features["inputs"].vocabulary, self.num_sentinels)
        targets = _sentinel_ids(output_features["targets"].vocabulary, self.num_sentinels)
        out["inputs"] = np.concatenate([np.asarray(out["inputs"]), inputs]).astype(np.int32)
        out["targets"] = np.concatenate([targets, np.asarray(out["targets"])]).astype(np.int32)
        return out


class _AppendEosAfterTrimKeepingLast:
    """append_eos_after_trim that keeps the last `keep` tokens (the sentinels) when it cuts."""

    def __init__(self, keep: int):
        self.keep = keep

    def __call__(self, example, output_features, sequence_length=None):
        out = dict(example)
        for key, feature in output_features.items():
            if key not in out or not feature.add_eos:
                continue
            tokens = np.asarray(out[key])
            eos = [feature.vocabulary.eos_id]
            if sequence_length is None or sequence_length.get(key) is None:
                kept = [tokens]
            elif self.keep > 0:
                length = min(sequence_length[key], len(tokens) + 1)
                keep = min(self.keep, length - 1)
                kept = [tokens[: length - (keep + 1)], tokens[-keep:]]  # [-0:] is all, as SeqIO
            else:
                kept = [tokens[: sequence_length[key] - 1]]
            out[key] = np.concatenate([*kept, eos]).astype(np.int32)
        return out


class _StripSentinels:
    """Removes the decoded sentinels in front of a prediction, then runs the task's own
    postprocessor (if any)."""

    def __init__(self, vocabulary, num_sentinels: int, postprocess_fn):
        self.vocabulary, self.num_sentinels = vocabulary, num_sentinels
        self.postprocess_fn = postprocess_fn

    def __call__(self, string_label, *args, **kwargs):
        # decoded here, not at registration: the vocabulary is read when first used
        ids = _sentinel_ids(self.vocabulary, self.num_sentinels).tolist()
        prefix = self.vocabulary.decode(ids)
        if string_label.startswith(prefix):
            string_label = string_label[len(prefix) :].strip()
        if self.postprocess_fn is None:
            return string_label
        return self.postprocess_fn(string_label, *args, **kwargs)


def add_task_with_sentinels(task_name: str, num_sentinels: int | None = 1) -> Task:
    """Registers the sentinel copy of a registered task (see module doc) and returns it."""
    task = TaskRegistry.get(task_name)
    steps = list(task.preprocessors)
    add = ExamplePreprocessor(_AddSentinels(num_sentinels))
    if steps and getattr(steps[-1], "fn", None) is append_eos_after_trim.fn:
        steps[-1:] = [add, ExamplePreprocessor(_AppendEosAfterTrimKeepingLast(num_sentinels))]
    else:
        steps.append(add)
    name = sentinel_task_name(task_name, num_sentinels)
    TaskRegistry.remove(name)
    return TaskRegistry.add(
        Task(
            name,
            task.source,
            steps,
            task.output_features,
            postprocess_fn=_StripSentinels(
                task.output_features["targets"].vocabulary, num_sentinels, task.postprocess_fn
            ),
            metric_fns=task.metric_fns,
        )
    )
