"""SeqIO's feature converters by SeqIO's names: t5forge's converters, plus the encoder-only
(BERT-style) and pass-through ones that task code and evaluation scripts name."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from t5forge.data.feature_converters import (
    DecoderFeatureConverter,
    EncDecFeatureConverter,
    FeatureConverter,
    PrefixLMFeatureConverter,
    _as_tokens,
)
from t5forge.errors import DataError

__all__ = [
    "DecoderFeatureConverter",
    "EncDecFeatureConverter",
    "EncoderFeatureConverter",
    "FeatureConverter",
    "LMFeatureConverter",
    "PassThroughFeatureConverter",
    "PrefixLMFeatureConverter",
]


class LMFeatureConverter(DecoderFeatureConverter):
    """SeqIO's name for the decoder-only language-model converter (`targets` only)."""


class EncoderFeatureConverter(FeatureConverter):
    """SeqIO's encoder-only converter: aligned `inputs` and `targets` become
    encoder_input_tokens / encoder_target_tokens, with loss only where inputs hold `mask_id`
    (masked language modelling, as BERT)."""

    task_features = ("inputs", "targets")

    def __init__(self, mask_id: int, pack: bool = True):
        super().__init__(pack)
        self.mask_id = int(mask_id)

    def slot_lengths(self, task_feature_lengths):
        return {"encoder": task_feature_lengths["inputs"]}

    def _segment(self, example, lengths):
        name = type(self).__name__
        inputs = _as_tokens(example, "inputs", name)[: lengths["inputs"]]
        targets = _as_tokens(example, "targets", name)[: lengths["inputs"]]
        if len(inputs) != len(targets):
            raise DataError(
                f"{name}: inputs ({len(inputs)} tokens) and targets ({len(targets)}) must be "
                "aligned, one target per input token"
            )
        return {
            "encoder": {
                "tokens": inputs,
                "targets": targets,
                "loss_weights": (inputs == self.mask_id).astype(inputs.dtype),
            }
        }

    def _model_features(self, rows):
        encoder = rows["encoder"]
        features = {
            "encoder_input_tokens": encoder["tokens"],
            "encoder_target_tokens": encoder["targets"],
            "encoder_loss_weights": encoder["loss_weights"],
        }
        if self.pack:
            features["encoder_segment_ids"] = encoder["segment_ids"]
            features["encoder_positions"] = encoder["positions"]
        return features


class PassThroughFeatureConverter:
    """SeqIO's converter that leaves examples as the task gives them (a task that already
    writes model features, or an inspection script)."""

    pack = False

    def __init__(self, **unused_kwargs):
        pass

    def __repr__(self) -> str:
        return "PassThroughFeatureConverter()"

    def apply(self, dataset, task_feature_lengths: Mapping[str, int]):
        return dataset

    def convert(
        self, examples: Iterable[Mapping[str, Any]], task_feature_lengths: Mapping[str, int]
    ) -> list[dict[str, np.ndarray]]:
        return [dict(example) for example in examples]
