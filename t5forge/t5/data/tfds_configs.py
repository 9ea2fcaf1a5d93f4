"""The TFDS builder configs T5's registry reads (`tfds.text.glue.Glue.builder_configs`,
`tfds.translate.wmt14.Wmt14Translate.builder_configs['de-en']`, ...): names, label classes
and language pairs as TFDS 4.9 defines them, in TFDS's order, without TensorFlow."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class BuilderConfig:
    name: str
    label_classes: Sequence[str] | None = None
    language_pair: tuple[str, str] | None = None


def _builder(class_name: str, configs: list[BuilderConfig]) -> types.SimpleNamespace:
    builder = type(class_name, (), {"builder_configs": {c.name: c for c in configs}})
    return types.SimpleNamespace(**{class_name: builder})


_MNLI = ("entailment", "neutral", "contradiction")
_RTE = ("entailment", "not_entailment")
_BOOL = ("False", "True")

glue = _builder(
    "Glue",
    [
        BuilderConfig("cola", ("unacceptable", "acceptable")),
        BuilderConfig("sst2", ("negative", "positive")),
        BuilderConfig("mrpc", ("not_equivalent", "equivalent")),
        BuilderConfig("qqp", ("not_duplicate", "duplicate")),
        BuilderConfig("stsb", None),
        BuilderConfig("mnli", _MNLI),
        BuilderConfig("mnli_mismatched", _MNLI),
        BuilderConfig("mnli_matched", _MNLI),
        BuilderConfig("qnli", _RTE),
        BuilderConfig("rte", _RTE),
        BuilderConfig("wnli", ("not_entailment", "entailment")),
        BuilderConfig("ax", _MNLI),
    ],
)

super_glue = _builder(
    "SuperGlue",
    [
        BuilderConfig("boolq", _BOOL),
        BuilderConfig("cb", ("entailment", "contradiction", "neutral")),
        BuilderConfig("copa", ("choice1", "choice2")),
        BuilderConfig("multirc", _BOOL),
        BuilderConfig("record", _BOOL),
        BuilderConfig("rte", _RTE),
        BuilderConfig("wic", _BOOL),
        BuilderConfig("wsc", _BOOL),
        BuilderConfig("wsc.fixed", _BOOL),
        BuilderConfig("axb", _RTE),
        BuilderConfig("axg", _RTE),
    ],
)


def _wmt(class_name: str, pairs: Sequence[str]) -> types.SimpleNamespace:
    configs = [BuilderConfig(p, language_pair=tuple(p.split("-"))) for p in pairs]
    return _builder(class_name, configs)


wmt14 = _wmt("Wmt14Translate", ["cs-en", "de-en", "fr-en", "hi-en", "ru-en"])
wmt15 = _wmt("Wmt15Translate", ["cs-en", "de-en", "fi-en", "fr-en", "ru-en"])
wmt16 = _wmt("Wmt16Translate", ["cs-en", "de-en", "fi-en", "ro-en", "ru-en", "tr-en"])
wmt19 = _wmt("Wmt19Translate", ["cs-en", "de-en", "fi-en", "gu-en", "kk-en", "lt-en", "ru-en"])
wmt_t2t = _wmt("WmtT2tTranslate", ["de-en"])
