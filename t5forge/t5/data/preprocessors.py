"""`t5.data.preprocessors`: T5's text-to-text preprocessors, per example over dicts of numpy
values and str, producing the same strings T5's TensorFlow versions produce.

TFDS gives Text features as UTF-8 bytes; every step here reads either bytes or str and
writes str. Regular expressions follow TensorFlow's (RE2) classes: `[[:punct:]]` is ASCII
punctuation and `\\s` is [\\t\\n\\f\\r ]. The unsupervised objectives (span_corruption,
iid_denoising, prefix_lm) and rekey are t5forge's, re-exported under T5's names.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import numpy as np

from t5forge.data.grain_ops.regroup import RegroupIterDataset
from t5forge.data.preprocessors import (
    LANGUAGE_NAMES,
    iid_denoising,
    prefix_lm,
    random_spans_helper,
    random_spans_noise_mask,
    reduce_concat_tokens,
    rekey,
    select_random_chunk,
    span_corruption,
    split_tokens,
)
from t5forge.data.preprocessors.framework import Example, dataset_preprocessor, example_preprocessor
from t5forge.errors import DataError

__all__ = [
    "definite_pronoun_resolution_simple",
    "glue",
    "iid_denoising",
    "prefix_lm",
    "random_spans_helper",
    "random_spans_noise_mask",
    "record",
    "reduce_concat_tokens",
    "rekey",
    "select_random_chunk",
    "span_corruption",
    "split_tokens",
    "squad",
    "stsb",
    "summarize",
    "text",
    "translate",
    "wsc",
    "wsc_simple",
]

_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")  # RE2's [[:punct:]]: ASCII punctuation
_WHITESPACE = re.compile(r"[\t\n\f\r ]+")  # RE2's \s


def text(value) -> str:
    """A Text feature as str (TFDS gives UTF-8 bytes)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _join(parts: Sequence, separator: str = " ") -> str:
    return separator.join(text(p) for p in parts)


def _pad_punctuation(value) -> str:
    """Spaces around ASCII punctuation, whitespace runs collapsed (T5's _pad_punctuation)."""
    return _WHITESPACE.sub(" ", _PUNCTUATION.sub(r" \1 ", text(value)))


def _string_join(parts: Sequence) -> str:
    return _WHITESPACE.sub(" ", _join(parts))


@functools.cache
def _language_name(code: str) -> str:
    """English name of a language code's first two letters (T5 asks babel; these are the
    languages of T5's tasks, and babel names them the same)."""
    try:
        import babel
    except ImportError:
        return LANGUAGE_NAMES.get(code[:2], code[:2])
    return babel.Locale(code[:2]).english_name


def _label_name(label, names: Sequence[str]) -> str:
    label = int(label)
    return "<unk>" if label == -1 else names[label]


@example_preprocessor
def translate(x: Example, source_language: str, target_language: str) -> Example:
    """{'de': ..., 'en': ...} -> inputs 'translate German to English: ...', targets the
    English."""
    source, target = _language_name(source_language), _language_name(target_language)
    return {
        "inputs": f"translate {source} to {target}: {text(x[source_language])}",
        "targets": text(x[target_language]),
    }


@example_preprocessor
def summarize(x: Example, article_key: str, summary_key: str) -> Example:
    """inputs 'summarize: <article>', targets the summary."""
    return {"inputs": _join(["summarize:", x[article_key]]), "targets": text(x[summary_key])}


@example_preprocessor
def squad(x: Example, include_context: bool = True) -> Example:
    """'question: <q> context: <c>' -> the first answer, punctuation padded; the example
    keeps id, context, question and every answer for evaluation."""
    answers = [_pad_punctuation(a) for a in x["answers"]["text"]]
    question, context = _pad_punctuation(x["question"]), _pad_punctuation(x["context"])
    if include_context:
        inputs = _string_join(["question:", question, "context:", context])
    else:
        inputs = _string_join(["squad trivia question:", question])
    return {
        "inputs": inputs,
        "targets": answers[0],
        "id": text(x["id"]),
        "context": context,
        "question": question,
        "answers": answers,
    }


@example_preprocessor
def glue(
    x: Example,
    benchmark_name: str,
    label_names: Sequence[str],
    feature_names: Sequence[str] | None = None,
    id_key: str | None = "idx",
) -> Example:
    """'<benchmark> <key>: <text> ...' (keys sorted unless feature_names orders them) ->
    the label's name ('<unk>' for label -1, the unlabelled test sets)."""
    keys = feature_names or sorted(set(x) - {"label", "idx"})
    parts = [benchmark_name]
    for key in keys:
        parts += [f"{key}:", x[key]]
    joined = _join(parts)
    out: Example = {}
    if benchmark_name == "multirc":
        joined = re.sub("<(/)?b>", "", joined.replace("<br>", " "))
        for part in ("paragraph", "question", "answer"):
            out[f"idx/{part}"] = x["idx"][part]
    elif id_key:
        out["idx"] = x[id_key]
    out["inputs"] = joined
    out["targets"] = _label_name(x["label"], label_names)
    return out


@example_preprocessor
def stsb(x: Example) -> Example:
    """STS-B's similarity rounded to the nearest 0.2 and written with one decimal ('3.4')."""
    five = np.float32(5)
    rounded = np.round(np.float32(x["label"]) * five) / five  # half to even, as tf.round
    return {
        "inputs": _join(["stsb sentence1:", x["sentence1"], "sentence2:", x["sentence2"]]),
        "targets": f"{float(rounded):.1f}",
        "idx": x["idx"],
    }


def _mark_span(sentence: str, span: str, index: int, mark: str) -> str:
    pattern = r"^((?:\S+\s){" + str(int(index)) + r"})(" + span + ")"
    return re.sub(pattern, r"\g<1>" + mark + r" \g<2> " + mark, sentence, count=1)


@example_preprocessor
def wsc(x: Example) -> Example:
    """'wsc text: ... * noun * ... # pronoun # ...' -> 'True' / 'False'."""
    sentence = _mark_span(text(x["text"]), text(x["span1_text"]), x["span1_index"], "*")
    span2_index = int(x["span2_index"]) + 2 * int(int(x["span1_index"]) < int(x["span2_index"]))
    sentence = _mark_span(sentence, text(x["span2_text"]), span2_index, "#")
    return {
        "inputs": _join(["wsc", "text:", sentence]),
        "targets": _label_name(x["label"], ["False", "True"]),
        "idx": x["idx"],
    }


def _record_examples(group: list, rng) -> list[Example]:
    """One text-to-text example per answer (one '<unk>' example when there is none)."""
    (x,) = group
    passage = re.sub(r"(\.|\?|\!|\"|')\n@highlight\n", r"\1 ", text(x["passage"]))
    passage = passage.replace("\n@highlight\n", ". ")
    entities = ", ".join(text(e) for e in x["entities"])
    answers = [text(a) for a in x["answers"]]
    inputs = _join(["record query:", x["query"], "entities:", entities, "passage:", passage])
    return [
        {
            "idx/passage": x["idx"]["passage"],
            "idx/query": x["idx"]["query"],
            "inputs": inputs,
            "targets": target,
            "answers": answers,
        }
        for target in answers or ["<unk>"]
    ]


@dataset_preprocessor
def record(ds):
    """ReCoRD: 'record query: ... entities: a, b passage: ...' once per answer."""
    return RegroupIterDataset(ds, _record_examples, 1, 0)


@example_preprocessor
def definite_pronoun_resolution_simple(x: Example, label: str = "wsc:") -> Example:
    """DPR: the first occurrence of the pronoun starred -> the right candidate."""
    pronoun = text(x["pronoun"])
    sentence = re.sub(r" (" + pronoun + r")( |\.|,)", r" *\1*\2", text(x["sentence"]), count=1)
    return {
        "inputs": _join([label, sentence]),
        "targets": text(x["candidates"][int(x["label"])]),
    }


# Two SuperGLUE WSC sentences whose span2_index does not point at the pronoun (T5's fix).
_WSC_SPECIAL_CASES = {
    "The boy continued to whip the pony , and eventually the pony threw him over. John laughed "
    'out quite loud. "Good for him," he said. ': "The boy continued to whip the pony , and "
    'eventually the pony threw him over. John laughed out quite loud. "Good for X ," he said.',
    "When they had eventually calmed down a bit , and had gotten home, Mr. Farley put the "
    "magic pebble in an iron safe . Some day they might want to use it , but really for now, "
    "what more could they wish for?": "When they had eventually calmed down a bit , and had "
    "gotten home, Mr. Farley put the magic pebble in an iron safe . Some day they might want "
    "to use X , but really for now, what more could they wish for?",
}


def _wsc_inputs(x: Example) -> str:
    """The WSC text with its pronoun replaced by X."""
    sentence = text(x["text"])
    if sentence in _WSC_SPECIAL_CASES:
        return _WSC_SPECIAL_CASES[sentence]
    words = sentence.split(" ")
    index = int(x["span2_index"])
    if not 0 < index < len(words) or words[index] != text(x["span2_text"]):
        raise DataError(
            f"WSC example {x.get('idx')}: span2_index {index} does not point at "
            f"{text(x['span2_text'])!r} in {sentence!r}"
        )
    return _join([" ".join(words[:index]), "X", " ".join(words[index + 1 :])])


@example_preprocessor
def wsc_simple(x: Example, label: str = "wsc:", correct_referent_only: bool = False):
    """WSC as 'wsc: ... *pronoun* ...' -> the candidate referent; correct_referent_only
    drops the examples whose candidate is not the referent (for training)."""
    if correct_referent_only and not bool(x.get("label", False)):
        return None
    starred = " *" + text(x["span2_text"]) + "* "
    return {
        "inputs": _join([label, _wsc_inputs(x).replace(" X ", starred)]),
        "targets": text(x["span1_text"]),
        "label": x.get("label", 0),
        "idx": x["idx"],
    }
