"""The small Python API: `t5forge.load(path)` and a `Model` to get logits, scores and generations.

Users arrive with a checkpoint in one of four formats and want answers without writing a
batch dict or a jit: `load` recognises Hugging Face model directories, t5forge training
checkpoints, T5X and Mesh TF checkpoints (t5forge.checkpoints.reader), and `Model` takes strings
(through the checkpoint's SentencePiece vocabulary) or token arrays. Batches are padded to power-of-two buckets (batch
size and lengths) so a stream of differently sized requests reuses a handful of compilations.

Lengths are policies, never an out-of-memory or a hang: every model knows its maximum input
length (the inputs length it was trained with when the checkpoint records it, else
`DEFAULT_MAX_INPUT_LENGTH`; or set `model.max_input_length`) and what to do with longer
inputs (`model.input_length_policy`: 'refuse', the default, or 'truncate' to keep the head);
`max_length` and score targets are bounded by `model.max_output_length`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np

from t5forge.checkpoints import reader
from t5forge.data.buckets import Buckets
from t5forge.data.feature_converters import converter_for
from t5forge.data.vocabularies import EOS_ID, SentencePieceVocabulary
from t5forge.errors import CheckpointError, ConfigError, DataError
from t5forge.interop import hub, huggingface
from t5forge.models.configs import T5Config
from t5forge.models.model import PREDICT_METHODS, build_model
from t5forge.models.transposed import untransposed
from t5forge.models.weights_dtype import is_int8, with_weights_dtype

logger = logging.getLogger(__name__)

# The API's padding (t5forge.data.buckets): lengths from 8 and batch sizes, each doubling.
_LENGTHS = Buckets(smallest=8)
_BATCHES = Buckets()
# Decoding reads the decoder's input shifted right: a one-token placeholder target (id 0, never
# scored) carries a decoder-only prompt's last token into its decoder_input_tokens.
_PREDICT_TARGET = (0,)
# T5's pre-training input length: the bound when a checkpoint records none.
DEFAULT_MAX_INPUT_LENGTH = 512
# Far beyond any T5 target length, small enough that one row's decoding cache stays modest.
DEFAULT_MAX_OUTPUT_LENGTH = 1024
INPUT_LENGTH_POLICIES = ("refuse", "truncate")


def pad_rows(rows: Sequence[Sequence[int]], batch: int, length: int) -> np.ndarray:
    """int32 [batch, length]: the rows left-aligned, zeros (padding) elsewhere."""
    out = np.zeros((batch, length), np.int32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


@dataclasses.dataclass(frozen=True)
class EncodedRows:
    """Token rows ready for the model, and what the input length policy did to them."""

    rows: list[list[int]]
    from_strings: bool
    truncated: list[bool]


def _is_token_row(item) -> bool:
    if hasattr(item, "__array__"):
        array = np.asarray(item)
        return array.ndim == 1 and (array.size == 0 or np.issubdtype(array.dtype, np.integer))
    return isinstance(item, (list, tuple)) and all(
        isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in item
    )


class Model:
    """A loaded model: config, params, optional vocabulary, and jitted inference entry points.

    `max_input_length` and `input_length_policy` ('refuse' or 'truncate') say what happens to
    inputs longer than the model was trained for; `max_output_length` bounds `max_length` and
    score targets. All three are plain attributes: set them to change the policy.
    """

    def __init__(
        self,
        config: T5Config,
        params: dict,
        vocabulary=None,
        *,
        max_input_length: int | None = None,
        input_length_policy: str = "refuse",
        max_output_length: int = DEFAULT_MAX_OUTPUT_LENGTH,
    ):
        self.config = config
        self.vocabulary = vocabulary
        self._model = build_model(config)
        self._model.check_params_match(params)
        self._converter = converter_for(self._model, pack=False)
        self.params = jax.device_put(params)
        self.max_input_length = int(max_input_length or DEFAULT_MAX_INPUT_LENGTH)
        self.input_length_policy = input_length_policy
        self.max_output_length = int(max_output_length)

    def set_weights_dtype(self, weights_dtype) -> None:
        """Stores every Dense kernel in `weights_dtype` ('float32', 'bfloat16' or 'int8'), for
        inference; see `load(weights_dtype=...)`. Int8 is one-way: load again to undo it."""
        self.params = with_weights_dtype(self.params, weights_dtype)

    @property
    def t5x_model(self):
        """The EncoderDecoderModel / DecoderOnlyModel behind this Model (T5X's model API:
        `score_batch`, `predict_batch_with_aux`, `decoding_state`), for callers that pad
        batches themselves, such as the server."""
        return self._model

    # ------------------------------------------------------------------ inputs

    def encode(
        self,
        sequences,
        name: str = "inputs",
        add_eos: bool = True,
        apply_length_policy: bool = True,
        warn_truncated: bool = True,
    ) -> EncodedRows:
        """Token rows for a list of strings (encoded, + EOS) or of token-id rows (as given).

        With `apply_length_policy`, rows longer than `max_input_length` are refused (DataError)
        or cut to their first `max_input_length` tokens (ending in EOS again when they did),
        as `input_length_policy` says; a cut is logged as a warning unless `warn_truncated` is
        False (a server reports them its own way: `EncodedRows.truncated`).
        """
        rows, from_strings = self._token_rows(sequences, name, add_eos)
        truncated = [False] * len(rows)
        if apply_length_policy:
            rows, truncated = self._apply_length_policy(rows, name, warn_truncated)
        return EncodedRows(rows, from_strings, truncated)

    def _token_rows(self, sequences, name: str, add_eos: bool) -> tuple[list[list[int]], bool]:
        """(rows of ids, whether they came from strings); strings are encoded (+EOS)."""
        if (
            isinstance(sequences, (str, bytes))
            or sequences is None
            or not (hasattr(sequences, "__array__") or isinstance(sequences, Sequence))
        ):
            raise DataError(
                f"{name} must be a list of strings or of token-id lists, not "
                f"{type(sequences).__name__}; wrap one string in a list"
            )
        if hasattr(sequences, "__array__"):  # numpy, jax or torch arrays
            array = np.asarray(sequences)
            if array.ndim != 2 or not np.issubdtype(array.dtype, np.integer):
                raise DataError(
                    f"{name} must be a 2-D integer token array [batch, length], got "
                    f"shape {array.shape} dtype {array.dtype}"
                )
            rows, from_strings = [list(map(int, row)) for row in array], False
        else:
            sequences = list(sequences)
            from_strings = bool(sequences) and isinstance(sequences[0], str)
            for i, item in enumerate(sequences):
                if from_strings != isinstance(item, str) or not (
                    from_strings or _is_token_row(item)
                ):
                    raise DataError(
                        f"{name}[{i}] is {type(item).__name__} {item!r:.40}; pass "
                        f"all strings or all lists of integer token ids"
                    )
                if from_strings:
                    _check_text(item, f"{name}[{i}]")
            if from_strings:
                if self.vocabulary is None:
                    raise DataError(
                        f"{name} are strings but the model has no vocabulary (no "
                        f"{reader.SPIECE} beside the checkpoint); set model.vocabulary or "
                        f"pass token id arrays"
                    )
                rows = [
                    self.vocabulary.encode(s) + ([EOS_ID] if add_eos else []) for s in sequences
                ]
            else:
                rows = [list(map(int, row)) for row in sequences]
        if not rows:
            raise DataError(f"{name} is empty; pass at least one sequence")
        for row in rows:
            bad = [t for t in row if t < 0 or t >= self.config.vocab_size]
            if bad:
                raise DataError(
                    f"{name} holds token id {bad[0]} but the model's vocab_size is "
                    f"{self.config.vocab_size}; use the model's own vocabulary"
                )
        return rows, from_strings

    def _apply_length_policy(
        self, rows, name: str, warn: bool = True
    ) -> tuple[list[list[int]], list[bool]]:
        if self.input_length_policy not in INPUT_LENGTH_POLICIES:
            raise ConfigError(
                f"input_length_policy must be one of {INPUT_LENGTH_POLICIES}, got "
                f"{self.input_length_policy!r}"
            )
        limit = self.max_input_length
        too_long = [len(row) > limit for row in rows]
        if not any(too_long):
            return rows, too_long
        if self.input_length_policy == "refuse":
            index = too_long.index(True)
            raise DataError(
                f"{name}[{index}] has {len(rows[index])} tokens, more than the "
                f"model's max_input_length {limit}; shorten it, or set "
                f"input_length_policy='truncate' to keep its first {limit} tokens"
            )
        if warn:
            logger.warning(
                "truncated %d of %d %s to the model's max_input_length %d",
                sum(too_long),
                len(rows),
                name,
                limit,
            )
        cut = [
            row[: limit - 1] + [EOS_ID] if long and row[-1] == EOS_ID else row[:limit]
            for row, long in zip(rows, too_long)
        ]
        return cut, too_long

    def check_output_length(self, length: int, name: str = "max_length") -> None:
        """ConfigError unless 1 <= length <= max_output_length."""
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 1:
            raise ConfigError(f"{name} must be an integer >= 1, got {length!r}")
        if length > self.max_output_length:
            raise ConfigError(
                f"{name} {length} is over the model's max_output_length "
                f"{self.max_output_length}; ask for fewer tokens or raise "
                f"model.max_output_length"
            )

    def _check_encoder_decoder_argument(self, encoder_input_tokens) -> None:
        if self.config.is_decoder_only and encoder_input_tokens is not None:
            raise DataError("this is a decoder-only model: pass encoder_input_tokens=None")
        if not self.config.is_decoder_only and encoder_input_tokens is None:
            raise DataError("this encoder-decoder model needs encoder_input_tokens")

    # ------------------------------------------------------------------ batches

    def score_features(self, input_rows, target_rows, lengths: dict, batch: int) -> dict:
        """The batch `score_batch` reads for (input, target) token rows, built by the model's
        feature converter with task feature `lengths` and `batch` rows (the rest padding)."""
        examples = [{"inputs": i, "targets": t} for i, t in zip(input_rows, target_rows)]
        return self._converter.batch(examples, lengths, batch)

    def predict_features(self, rows, width: int, batch: int) -> tuple[dict, int]:
        """(the batch decoding reads for input rows of at most `width` tokens, padded to `batch`
        rows, the prompt positions the decoder steps through first: `width` for a decoder-only
        model, which reads the input as its prompt, else 0)."""
        examples = [{"inputs": row, "targets": _PREDICT_TARGET} for row in rows]
        features = self._converter.batch(examples, {"inputs": width, "targets": 1}, batch)
        decoding = {name: features[name] for name in self._model.decoding_inputs}
        return decoding, width if self.config.is_decoder_only else 0

    # ------------------------------------------------------------------ logits and scores

    def logits(self, encoder_input_tokens, decoder_input_tokens) -> np.ndarray:
        """Teacher-forced logits float32 [B, T, vocab] for int arrays (0 = padding).

        `decoder_input_tokens` are the targets shifted right (starting with 0); every position
        is computed causally, as transformers does. Decoder-only models take None as encoder
        input.
        """
        self._check_encoder_decoder_argument(encoder_input_tokens)
        decoder_rows, _ = self._token_rows(decoder_input_tokens, "decoder_input_tokens", False)
        batch, length = len(decoder_rows), len(decoder_rows[0])
        padded_batch, padded_length = _BATCHES.fit(batch), _LENGTHS.fit(length)
        features = {
            "decoder_input_tokens": pad_rows(decoder_rows, padded_batch, padded_length),
            # Only a validity marker: every real position is attended causally.
            "decoder_target_tokens": pad_rows([[1] * length] * batch, padded_batch, padded_length),
        }
        if encoder_input_tokens is not None:
            encoder_rows, _ = self._token_rows(encoder_input_tokens, "encoder_input_tokens", False)
            if len(encoder_rows) != batch:
                raise DataError(
                    f"encoder_input_tokens has {len(encoder_rows)} rows but "
                    f"decoder_input_tokens has {batch}; pass one row per example"
                )
            features["encoder_input_tokens"] = pad_rows(
                encoder_rows, padded_batch, _LENGTHS.fit(len(encoder_rows[0]))
            )
        logits = self._model.logits(self.params, features)
        return np.asarray(logits[:batch, :length], np.float32)

    def score(self, inputs, targets) -> np.ndarray:
        """Sum of target-token log-likelihoods per (input, target) pair, float32 [B].

        Strings are encoded with EOS appended to both (decoder-only: the prompt gets none);
        token arrays are used as given, 0 = padding. Inputs follow the input length policy;
        targets longer than `max_output_length` are refused.
        """
        input_rows = self.encode(inputs, "inputs", not self.config.is_decoder_only).rows
        target_rows = self.encode(targets, "targets", True, apply_length_policy=False).rows
        if len(input_rows) != len(target_rows):
            raise DataError(
                f"score got {len(input_rows)} inputs but {len(target_rows)} targets; "
                f"pass one target per input"
            )
        self.check_output_length(max(map(len, target_rows)), "the longest target's length")
        input_length = max(1, *map(len, input_rows))
        target_length = max(1, *map(len, target_rows))
        if self.config.is_decoder_only:  # one sequence per pair: bucket the total length
            total = _LENGTHS.fit(input_length + target_length)
            lengths = {"inputs": input_length, "targets": total - input_length}
        else:
            lengths = {"inputs": _LENGTHS.fit(input_length), "targets": _LENGTHS.fit(target_length)}
        batch = _BATCHES.fit(len(input_rows))
        features = self.score_features(input_rows, target_rows, lengths, batch)
        return np.asarray(
            self._model.score_batch(self.params, features)[: len(input_rows)], np.float32
        )

    # ------------------------------------------------------------------ generation

    def generate(
        self,
        inputs,
        max_length: int = 64,
        method: str = "greedy",
        num_beams: int = 4,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 0.0,
        seed: int = 0,
        alpha: float = 0.6,
    ):
        """Decodes each input: strings in -> strings out; token arrays in -> int32 [B, max_length].

        method 'greedy', 'beam' (num_beams, length penalty alpha as T5X) or 'sample'
        (temperature, top_k or top_p, seed). Output tokens stop at EOS and are 0-padded.
        `max_length` is at most `max_output_length`; inputs follow the input length policy.
        """
        self.check_output_length(max_length)
        if method not in PREDICT_METHODS:
            raise ConfigError(f"unknown generation method {method!r}; use one of {PREDICT_METHODS}")
        if method == "beam" and num_beams < 1:
            raise ConfigError(f"num_beams must be >= 1 for beam search, got {num_beams}")
        if top_k > 0 and top_p > 0:
            raise ConfigError(f"use top_k or top_p, not both (got top_k={top_k}, top_p={top_p})")
        encoded = self.encode(inputs, "inputs", not self.config.is_decoder_only)
        rows = encoded.rows
        features, prompt_width = self.predict_features(
            rows, _LENGTHS.fit(max(map(len, rows))), _BATCHES.fit(len(rows))
        )
        tokens = self._model.predict_batch(
            self.params,
            features,
            jax.random.PRNGKey(seed),
            method=method,
            num_decodes=num_beams if method == "beam" else 1,
            alpha=alpha,
            temperature=temperature,
            topk=top_k,
            topp=top_p,
            max_decode_length=prompt_width + max_length,
        )
        tokens = np.asarray(tokens, np.int32)[: len(rows), :max_length]
        if encoded.from_strings:
            return [self.vocabulary.decode(row.tolist()) for row in tokens]
        return tokens

    # ------------------------------------------------------------------ export

    def save_hf(self, path) -> Path:
        """Writes a directory `transformers.T5ForConditionalGeneration.from_pretrained` loads.

        Missing parent directories are created; anything the file system refuses (a file in
        the way, no permission, disk full) is one CheckpointError line naming the path.
        """
        if not isinstance(path, (str, os.PathLike)):
            raise ConfigError(
                f"save_hf takes a directory path (str or os.PathLike), got "
                f"{type(path).__name__} {path!r:.40}"
            )
        if is_int8(self.params):
            raise ConfigError(
                "save_hf writes float weights, and this model's Dense kernels are int8 "
                "(weights_dtype='int8'); save from a model loaded without it"
            )
        vocab_path, extra_ids = None, 0
        if isinstance(self.vocabulary, SentencePieceVocabulary):
            vocab_path, extra_ids = self.vocabulary.path, self.vocabulary.extra_ids
        try:
            return huggingface.save_hf_dir(
                jax.device_get(untransposed(self.params)),
                self.config,
                path,
                vocab_path=vocab_path,
                extra_ids=extra_ids,
            )
        except OSError as error:
            raise CheckpointError(
                f"cannot write the Hugging Face directory {path}: "
                f"{error.strerror or error} ({error.filename or path}); pick a "
                f"writable directory"
            ) from error


# ---------------------------------------------------------------------- loading


def load(path, config=None, weights_dtype=None, dtype=None) -> Model:
    """Loads a Hugging Face model dir or hub id, a t5forge, T5X or Mesh TF checkpoint as a Model.

    A hub id (`'google/t5-v1_1-small'`, `'org/name@revision'`, or `hf://...`) that is no local
    path is read from the Hugging Face cache, else downloaded into it (t5forge.interop.hub).

    `config` (a preset name like 't5_1_1/small', a model gin file or a T5Config) is needed for
    T5X and Mesh TF checkpoints (the latter read with TensorFlow), which do not record it; for
    the others it overrides the stored config.
    The model's `max_input_length` is the inputs length a t5forge run trained with (its
    checkpoint metadata or config.gin), a Hugging Face config's `n_positions`, or
    DEFAULT_MAX_INPUT_LENGTH.
    `weights_dtype='bfloat16'` stores the matmul weights (every Dense kernel) in bfloat16 for
    inference, as transformers' `torch_dtype`: greedy decoding on a CPU with AVX-512 BF16 ran
    ~20% faster (docs/performance.md), and outputs may differ slightly from float32's.
    `weights_dtype='int8'` stores them as int8 with a float32 scale per output channel and
    quantises each product's input per token (models/quantized.py; a Switch router stays
    float32). Embeddings, norms and the relative-position tables stay float32 either way.
    `dtype` ('float32' or 'bfloat16') is the activation dtype the network computes in,
    replacing the checkpoint config's (T5Config.dtype); docs/inference-dtypes.md compares them.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise CheckpointError(
            f"load takes a checkpoint path (str or os.PathLike), got "
            f"{type(path).__name__} {path!r:.40}; pass a Hugging Face model "
            f"directory, a t5forge checkpoint or a T5X checkpoint"
        )
    checkpoint = reader.read(hub.local_path(path, bare_ids=True), config)
    model_config = checkpoint.config
    if dtype is not None:  # T5Config refuses what is not one of its DTYPES, in one line
        model_config = dataclasses.replace(model_config, dtype=getattr(dtype, "__name__", dtype))
    model = Model(
        model_config,
        checkpoint.params,
        checkpoint.vocabulary,
        max_input_length=checkpoint.feature_lengths.get("inputs"),
    )
    if weights_dtype is not None:
        model.set_weights_dtype(weights_dtype)
    return model


def _check_text(text: str, where: str) -> None:
    """DataError for a string SentencePiece cannot take: a lone surrogate (half of a UTF-16
    pair, e.g. from text decoded with errors='surrogateescape') is not Unicode text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise DataError(
            f"{where} holds {text[error.start]!r} at character {error.start}, a lone surrogate "
            "that is not valid Unicode text; fix the text's decoding (or drop that character)"
        ) from None
