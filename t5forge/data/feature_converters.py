"""Feature converters: task features (`inputs`/`targets` token lists) -> model features.

A task speaks in variable-length token lists; a model wants fixed-length int32 arrays
named after what it does with them (`encoder_input_tokens`, `decoder_target_tokens`...).
Converters trim each feature to the task feature lengths, then either pad every example
alone (`pack=False`) or pack several examples into one row greedily in order (`pack=True`:
append while every feature still fits, else emit the row and start a new one), adding
segment ids and per-segment positions so attention never crosses examples.

Every converter offers the same work twice: `convert(examples, lengths)` as a pure function
over a list (what golden tests check) and `apply(dataset, lengths)` as a grain
`IterDataset` transformation whose iterator state resumes exactly mid-pack.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import grain
import numpy as np

from t5forge.errors import ConfigError, DataError

MODEL_DTYPE = np.int32

# A segment is one example's trimmed token tracks, grouped by the "slot" (encoder or
# decoder row) they are packed into: {slot: {track: 1-D int32 array}}. All tracks of a
# slot share one length; every slot has a "tokens" track.
Segment = dict[str, dict[str, np.ndarray]]


def _as_tokens(example: Mapping[str, Any], feature: str, converter: str) -> np.ndarray:
    """The 1-D int32 token array of one feature, or a DataError naming what is wrong."""
    if feature not in example:
        raise DataError(
            f"{converter} needs the task feature {feature!r} but an example only has "
            f"{sorted(example)}; fix the task's preprocessors or pick another converter"
        )
    tokens = np.asarray(example[feature])
    if tokens.ndim != 1 or (tokens.size and tokens.dtype.kind not in "iu"):  # integer ids
        raise DataError(
            f"{converter}: feature {feature!r} must be a 1-D list of token ids, got "
            f"{tokens.dtype} with shape {tokens.shape}; tokenize it before converting"
        )
    return tokens.astype(MODEL_DTYPE)


def _assemble_slot(
    tracks_per_segment: list[dict[str, np.ndarray]],
    length: int,
    packed: bool,
    row: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Concatenates one slot's segments into padded rows (+ segment ids and positions if packed).

    Also builds `shifted`: the tokens moved one step right within each segment, with 0
    (the decoder's start token) at every segment start. All rows are views of one buffer:
    this runs once per example, so allocations count. `row` (zero-filled views, one per track)
    is written into instead when the caller holds a whole batch in one buffer.
    """
    if row is None:
        names = [*tracks_per_segment[0], "shifted"]
        if packed:
            names += ["segment_ids", "positions"]
        row = dict(zip(names, np.zeros((len(names), length), MODEL_DTYPE)))
    offset = 0
    for segment_id, tracks in enumerate(tracks_per_segment, start=1):
        size = len(tracks["tokens"])
        end = offset + size
        for name, values in tracks.items():
            row[name][offset:end] = values
        if size:
            row["shifted"][offset + 1 : end] = tracks["tokens"][:-1]
        if packed:
            row["segment_ids"][offset:end] = segment_id
            row["positions"][offset:end] = np.arange(size, dtype=MODEL_DTYPE)
        offset = end
    return row


def _assemble_rows(
    tracks_per_row: list[dict[str, np.ndarray]], length: int, batch_size: int
) -> dict[str, np.ndarray]:
    """One slot's unpacked rows as [batch_size, length] arrays, an example per row and zeros
    (padding rows) after them, assembled in one buffer."""
    names = [*tracks_per_row[0], "shifted"]
    buffer = np.zeros((len(names), batch_size, length), MODEL_DTYPE)
    for i, tracks in enumerate(tracks_per_row):
        _assemble_slot([tracks], length, packed=False, row=dict(zip(names, buffer[:, i])))
    return dict(zip(names, buffer))


def _non_padding(tokens: np.ndarray) -> np.ndarray:
    """Loss weights: 1 on every token but padding (id 0), as seqio's `non_padding_position`."""
    return (tokens != 0).astype(MODEL_DTYPE)


def _decoder_features(decoder: dict[str, np.ndarray], packed: bool) -> dict[str, np.ndarray]:
    """The decoder slot's model features, named alike by every converter."""
    features = {
        "decoder_target_tokens": decoder["tokens"],
        "decoder_input_tokens": decoder["shifted"],
        "decoder_loss_weights": decoder["loss_weights"],
    }
    if packed:
        features["decoder_segment_ids"] = decoder["segment_ids"]
        features["decoder_positions"] = decoder["positions"]
    return features


class FeatureConverter(abc.ABC):
    """Turns task examples into fixed-length model rows, packed or padded."""

    # The task features this converter reads, each with a length in task_feature_lengths.
    task_features: tuple[str, ...] = ()

    def __init__(self, pack: bool = True):
        self.pack = pack

    def __repr__(self) -> str:
        return f"{type(self).__name__}(pack={self.pack})"

    # -- what each converter defines -------------------------------------------------

    @abc.abstractmethod
    def slot_lengths(self, task_feature_lengths: Mapping[str, int]) -> dict[str, int]:
        """The length of each packed row (slot) given the task feature lengths."""

    @abc.abstractmethod
    def _segment(self, example: Mapping[str, Any], lengths: Mapping[str, int]) -> Segment:
        """One example's trimmed tracks, grouped by slot."""

    @abc.abstractmethod
    def _model_features(self, rows: dict[str, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Names the assembled slot rows as model features."""

    # -- shared machinery -------------------------------------------------------------

    def padding_row(self, task_feature_lengths: Mapping[str, int]) -> dict[str, np.ndarray]:
        """An all-padding model row (zero loss weight): fills the last eval batch."""
        lengths = self._checked(task_feature_lengths)
        empty = self._segment({feature: [] for feature in self.task_features}, lengths)
        return self._render([empty], self.slot_lengths(lengths))

    def model_feature_lengths(self, task_feature_lengths: Mapping[str, int]) -> dict[str, int]:
        """The length of every model feature this converter emits."""
        return {name: len(v) for name, v in self.padding_row(task_feature_lengths).items()}

    def _checked(self, task_feature_lengths: Mapping[str, int]) -> dict[str, int]:
        missing = [f for f in self.task_features if f not in task_feature_lengths]
        if missing:
            raise ConfigError(
                f"{type(self).__name__} needs task_feature_lengths for {missing}, got "
                f"{dict(task_feature_lengths)}; set e.g. {{'inputs': 512, 'targets': 114}}"
            )
        lengths = {f: int(task_feature_lengths[f]) for f in self.task_features}
        bad = {f: n for f, n in lengths.items() if n <= 0}
        if bad:
            raise ConfigError(f"task_feature_lengths must be positive, got {bad}")
        return lengths

    def _render(self, segments: list[Segment], slot_lengths: Mapping[str, int]) -> dict:
        rows = {
            slot: _assemble_slot([segment[slot] for segment in segments], length, self.pack)
            for slot, length in slot_lengths.items()
        }
        return self._model_features(rows)

    def _fits(self, pack: list[Segment], segment: Segment, slot_lengths: Mapping[str, int]):
        return all(
            sum(len(s[slot]["tokens"]) for s in pack) + len(segment[slot]["tokens"]) <= length
            for slot, length in slot_lengths.items()
        )

    def convert(
        self, examples: Iterable[Mapping[str, Any]], task_feature_lengths: Mapping[str, int]
    ) -> list[dict[str, np.ndarray]]:
        """Converts a finite list of examples; the reference the grain path must match."""
        lengths = self._checked(task_feature_lengths)
        slot_lengths = self.slot_lengths(lengths)
        segments = [self._segment(example, lengths) for example in examples]
        if not self.pack:
            return [self._render([segment], slot_lengths) for segment in segments]
        rows, pack = [], []
        for segment in segments:
            if pack and not self._fits(pack, segment, slot_lengths):
                rows.append(self._render(pack, slot_lengths))
                pack = []
            pack.append(segment)
        if pack:
            rows.append(self._render(pack, slot_lengths))
        return rows

    def batch(
        self,
        examples: Iterable[Mapping[str, Any]],
        task_feature_lengths: Mapping[str, int],
        batch_size: int,
    ) -> dict[str, np.ndarray]:
        """One unpacked batch for a few examples (an API call, a server batch): a row each,
        then all-padding rows up to `batch_size`, every feature [batch_size, length]. What
        `convert` and stacking would give, built in one buffer per slot: this runs per call."""
        if self.pack:
            raise ConfigError(f"{self!r}.batch puts one example per row; use pack=False")
        lengths = self._checked(task_feature_lengths)
        segments = [self._segment(example, lengths) for example in examples]
        rows = {
            slot: _assemble_rows([segment[slot] for segment in segments], length, batch_size)
            for slot, length in self.slot_lengths(lengths).items()
        }
        return self._model_features(rows)

    def apply(
        self, dataset: grain.IterDataset, task_feature_lengths: Mapping[str, int]
    ) -> grain.IterDataset:
        """The same conversion as a checkpointable grain transformation."""
        lengths = self._checked(task_feature_lengths)
        slot_lengths = self.slot_lengths(lengths)
        if not self.pack:
            return dataset.map(
                lambda example: self._render([self._segment(example, lengths)], slot_lengths)
            )
        return _GreedyPackIterDataset(dataset, _PackPlan(self, lengths, slot_lengths))


class EncDecFeatureConverter(FeatureConverter):
    """Encoder-decoder models: `inputs` feed the encoder, `targets` the decoder."""

    task_features = ("inputs", "targets")

    def slot_lengths(self, task_feature_lengths):
        return {
            "encoder": task_feature_lengths["inputs"],
            "decoder": task_feature_lengths["targets"],
        }

    def _segment(self, example, lengths):
        name = type(self).__name__
        inputs = _as_tokens(example, "inputs", name)[: lengths["inputs"]]
        targets = _as_tokens(example, "targets", name)[: lengths["targets"]]
        return {
            "encoder": {"tokens": inputs},
            "decoder": {"tokens": targets, "loss_weights": _non_padding(targets)},
        }

    def _model_features(self, rows):
        encoder = rows["encoder"]
        features = {"encoder_input_tokens": encoder["tokens"]}
        if self.pack:
            features["encoder_segment_ids"] = encoder["segment_ids"]
            features["encoder_positions"] = encoder["positions"]
        return {**features, **_decoder_features(rows["decoder"], self.pack)}


class DecoderFeatureConverter(FeatureConverter):
    """Decoder-only language models: `targets` only, loss on every real token."""

    task_features = ("targets",)

    def slot_lengths(self, task_feature_lengths):
        return {"decoder": task_feature_lengths["targets"]}

    def _segment(self, example, lengths):
        targets = _as_tokens(example, "targets", type(self).__name__)[: lengths["targets"]]
        return {"decoder": {"tokens": targets, "loss_weights": _non_padding(targets)}}

    def _model_features(self, rows):
        return _decoder_features(rows["decoder"], self.pack)


class PrefixLMFeatureConverter(DecoderFeatureConverter):
    """Decoder-only prefix LM: `inputs + targets` in one row, full attention over the prefix.

    `decoder_causal_attention` is 1 over the prefix as the decoder sees it: the shifted
    row holds the start token and then every input token, so the visible region is one
    position longer than the inputs. The loss covers the targets only unless
    `loss_on_targets_only=False`.
    """

    task_features = ("inputs", "targets")

    def __init__(self, pack: bool = True, loss_on_targets_only: bool = True):
        super().__init__(pack)
        self.loss_on_targets_only = loss_on_targets_only

    def slot_lengths(self, task_feature_lengths):
        return {"decoder": task_feature_lengths["inputs"] + task_feature_lengths["targets"]}

    def _segment(self, example, lengths):
        name = type(self).__name__
        inputs = _as_tokens(example, "inputs", name)[: lengths["inputs"]]
        targets = _as_tokens(example, "targets", name)[: lengths["targets"]]
        tokens = np.concatenate([inputs, targets])
        loss_weights = _non_padding(tokens)
        if self.loss_on_targets_only:
            loss_weights[: len(inputs)] = 0
        causal_attention = np.zeros_like(tokens)
        causal_attention[: len(inputs) + 1] = 1
        return {
            "decoder": {
                "tokens": tokens,
                "loss_weights": loss_weights,
                "causal_attention": causal_attention,
            }
        }

    def _model_features(self, rows):
        features = super()._model_features(rows)
        features["decoder_causal_attention"] = rows["decoder"]["causal_attention"]
        return features


def converter_for(model, pack: bool = True) -> FeatureConverter:
    """The converter a model declares, as T5X's FEATURE_CONVERTER_CLS: by its class name here,
    since models never import data."""
    name = model.FEATURE_CONVERTER_CLS
    converters = (EncDecFeatureConverter, DecoderFeatureConverter, PrefixLMFeatureConverter)
    by_name = {converter.__name__: converter for converter in converters}
    if name not in by_name:
        raise ConfigError(
            f"{type(model).__name__}.FEATURE_CONVERTER_CLS is {name!r}; use one of {sorted(by_name)}"
        )
    return by_name[name](pack=pack)


def _segment_to_state(segment: Segment) -> dict:
    return {
        slot: {name: values.tolist() for name, values in tracks.items()}
        for slot, tracks in segment.items()
    }


def _segment_from_state(state: Mapping) -> Segment:
    return {
        slot: {name: np.asarray(values, MODEL_DTYPE) for name, values in tracks.items()}
        for slot, tracks in state.items()
    }


@dataclasses.dataclass(frozen=True)
class _PackPlan:
    """One converter with its checked lengths: what the grain node and its iterators share."""

    converter: FeatureConverter
    lengths: dict[str, int]
    slot_lengths: dict[str, int]

    def segment(self, example: Mapping[str, Any]) -> Segment:
        return self.converter._segment(example, self.lengths)

    def fits(self, pending: list[Segment], segment: Segment) -> bool:
        return self.converter._fits(pending, segment, self.slot_lengths)

    def render(self, row: list[Segment]) -> dict:
        return self.converter._render(row, self.slot_lengths)


class _GreedyPackIterator(grain.DatasetIterator):
    """Packs parent examples greedily in order; the state carries the row being built."""

    def __init__(self, parent, plan: _PackPlan):
        super().__init__(parent)
        self._plan = plan
        self._pending: list[Segment] = []

    def __next__(self):
        while True:
            try:
                example = next(self._parent)
            except StopIteration:
                if not self._pending:
                    raise
                row, self._pending = self._pending, []
                return self._plan.render(row)
            segment = self._plan.segment(example)
            if self._pending and not self._plan.fits(self._pending, segment):
                row, self._pending = self._pending, [segment]
                return self._plan.render(row)
            self._pending.append(segment)

    def get_state(self):
        return {
            "parent": self._parent.get_state(),
            "pending": [_segment_to_state(segment) for segment in self._pending],
        }

    def set_state(self, state):
        self._parent.set_state(state["parent"])
        self._pending = [_segment_from_state(segment) for segment in state["pending"]]


class _GreedyPackIterDataset(grain.IterDataset):
    """grain node for greedy in-order packing (see `FeatureConverter.apply`)."""

    def __init__(self, parent, plan: _PackPlan):
        super().__init__(parent)
        self._plan = plan

    def __iter__(self):
        return _GreedyPackIterator(self._parent.__iter__(), self._plan)

    def __str__(self):
        return f"GreedyPackIterDataset({self._plan.converter!r}, {self._plan.slot_lengths})"
