"""`t5.data.postprocessors`: T5's functions from decoded text (and, for targets, the
example) to the values T5's metrics compare. Strings in examples may be bytes (TFDS)."""

from __future__ import annotations

from collections.abc import Sequence

from t5forge.t5.data.preprocessors import text

__all__ = [
    "lower_text",
    "multirc",
    "qa",
    "rank_classification",
    "record",
    "span_qa",
    "string_label_to_class_id",
    "string_to_float",
    "wsc_simple",
]


def string_to_float(string, default: float = -1.0, **unused_kwargs) -> float:
    """The number the model wrote, or `default` when it is not one."""
    try:
        return float(string)
    except ValueError:
        return default


def lower_text(string, **unused_kwargs) -> str:
    return string.lower()


def string_label_to_class_id(
    string_label, label_classes: Sequence[str], default: int = -1, **unused_kwargs
) -> int:
    """The index of the label the model wrote, or `default` for anything else."""
    return list(label_classes).index(string_label) if string_label in label_classes else default


def multirc(string_label, example=None, is_target: bool = False) -> dict:
    """The class with the question for grouping (MultiRC scores answers per question)."""
    result = {"value": string_label_to_class_id(string_label, label_classes=("False", "True"))}
    if is_target:
        result["group"] = example["idx/question"]
    return result


def record(answer, example=None, is_target: bool = False) -> dict:
    """The answer, or for a target every answer and the (passage, query) group."""
    if is_target:
        return {
            "value": [text(a) for a in example["answers"]],
            "group": (example["idx/passage"], example["idx/query"]),
        }
    return {"value": answer}


def qa(answer, example=None, is_target: bool = False):
    """The answer, or for a target every reference answer."""
    if is_target:
        return [text(a) for a in example["answers"]]
    return answer


def span_qa(answer, example=None, is_target: bool = False):
    """The answer, or for a target the answers and the context they are spans of."""
    if is_target:
        return {
            "answers": [text(a) for a in example["answers"]],
            "context": text(example["context"]),
        }
    return answer


_DETERMINERS = {
    "a", "an", "few", "her", "his", "each", "every", "many", "much", "my", "our", "some",
    "that", "the", "their", "these", "this", "those", "which", "whose", "your",
}  # fmt: skip


def _without_determiners(value) -> str:
    words = text(value).strip().lower().split(" ")
    return " ".join(w for w in words if w not in _DETERMINERS)


def wsc_simple(prediction, example=None, is_target: bool = False) -> int:
    """1 when the model named the candidate referent (ignoring case and determiners), the
    label for a target."""
    if is_target:
        return example["label"]
    prediction = _without_determiners(prediction)
    if not prediction:
        return -1
    referent = _without_determiners(example["targets_pretokenized"])
    if ("'" in prediction) != ("'" in referent):
        return 0
    predicted, expected = set(prediction.split(" ")), set(referent.split(" "))
    return int(predicted.issubset(expected) or expected.issubset(predicted))


def rank_classification(
    score, example=None, is_target: bool = False, passthrough_feature_keys=None
):
    """For a target (idx, is_correct, weight, target length[, passthrough...]); the score
    otherwise."""
    if not is_target:
        return score
    outputs = [
        tuple(example["idx"]),
        example["is_correct"],
        example.get("weight", 1.0),
        len(example["targets"]),
    ]
    outputs += [example[key] for key in passthrough_feature_keys or ()]
    return tuple(outputs)
