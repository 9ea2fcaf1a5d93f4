"""The small Python API: `t5forge.load(path)` and a `Model` to get logits, scores and generations.

Users arrive with a checkpoint in one of three formats and want answers without writing a
batch dict or a jit: `load` recognises Hugging Face model directories, t5forge training
checkpoints and T5X checkpoints, and `Model` takes strings (through the checkpoint's
SentencePiece vocabulary) or token arrays. Batches are padded to power-of-two buckets (batch
size and lengths) so a stream of differently sized requests reuses a handful of compilations.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np

from t5forge.data.vocabularies import EOS_ID, SentencePieceVocabulary
from t5forge.errors import CheckpointError, ConfigError, DataError
from t5forge.interop import huggingface
from t5forge.models.configs import PRESETS, T5Config, config_from_gin, get_config
from t5forge.models.model import PREDICT_METHODS, build_model
from t5forge.models.param_layout import stack_layers

_MIN_LENGTH_BUCKET = 8
_SPIECE = "spiece.model"
# transformers' T5Tokenizer appends 100 sentinels to spiece.model unless told otherwise.
_HF_DEFAULT_EXTRA_IDS = 100


def _bucket(size: int, minimum: int = 1) -> int:
    """The power of two >= size (and >= minimum) that a dimension is padded to."""
    return max(minimum, 1 << max(0, size - 1).bit_length())


def _pad_rows(rows: Sequence[Sequence[int]], batch: int, length: int) -> np.ndarray:
    out = np.zeros((batch, length), np.int32)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


def _shift_right(targets: np.ndarray) -> np.ndarray:
    return np.pad(targets, ((0, 0), (1, 0)))[:, :-1]


class Model:
    """A loaded model: config, params, optional vocabulary, and jitted inference entry points."""

    def __init__(self, config: T5Config, params: dict, vocabulary=None):
        self.config = config
        self.vocabulary = vocabulary
        self._model = build_model(config)
        self._model.check_params_match(params)
        self.params = jax.device_put(params)

    # ------------------------------------------------------------------ inputs

    def _token_rows(self, sequences, name: str, add_eos: bool) -> tuple[list[list[int]], bool]:
        """(rows of ids, whether they came from strings); strings are encoded (+EOS)."""
        if isinstance(sequences, str):
            raise DataError(f"{name} must be a list of strings or a 2-D token array, not one "
                            f"string; wrap it in a list")
        if hasattr(sequences, "__array__"):  # numpy, jax or torch arrays
            array = np.asarray(sequences)
            if array.ndim != 2 or not np.issubdtype(array.dtype, np.integer):
                raise DataError(f"{name} must be a 2-D integer token array [batch, length], got "
                                f"shape {array.shape} dtype {array.dtype}")
            rows, from_strings = [list(map(int, row)) for row in array], False
        else:
            sequences = list(sequences)
            from_strings = bool(sequences) and all(isinstance(s, str) for s in sequences)
            if from_strings:
                if self.vocabulary is None:
                    raise DataError(f"{name} are strings but the model has no vocabulary (no "
                                    f"{_SPIECE} beside the checkpoint); set model.vocabulary or "
                                    f"pass token id arrays")
                rows = [self.vocabulary.encode(s) + ([EOS_ID] if add_eos else [])
                        for s in sequences]
            else:
                rows = [list(map(int, row)) for row in sequences]
        if not rows:
            raise DataError(f"{name} is empty; pass at least one sequence")
        for row in rows:
            bad = [t for t in row if t < 0 or t >= self.config.vocab_size]
            if bad:
                raise DataError(f"{name} holds token id {bad[0]} but the model's vocab_size is "
                                f"{self.config.vocab_size}; use the model's own vocabulary")
        return rows, from_strings

    def _check_encoder_decoder_argument(self, encoder_input_tokens) -> None:
        if self.config.is_decoder_only and encoder_input_tokens is not None:
            raise DataError("this is a decoder-only model: pass encoder_input_tokens=None")
        if not self.config.is_decoder_only and encoder_input_tokens is None:
            raise DataError("this encoder-decoder model needs encoder_input_tokens")

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
        padded_batch, padded_length = _bucket(batch), _bucket(length, _MIN_LENGTH_BUCKET)
        features = {
            "decoder_input_tokens": _pad_rows(decoder_rows, padded_batch, padded_length),
            # Only a validity marker: every real position is attended causally.
            "decoder_target_tokens": _pad_rows([[1] * length] * batch, padded_batch,
                                               padded_length),
        }
        if encoder_input_tokens is not None:
            encoder_rows, _ = self._token_rows(encoder_input_tokens, "encoder_input_tokens",
                                               False)
            if len(encoder_rows) != batch:
                raise DataError(f"encoder_input_tokens has {len(encoder_rows)} rows but "
                                f"decoder_input_tokens has {batch}; pass one row per example")
            features["encoder_input_tokens"] = _pad_rows(
                encoder_rows, padded_batch, _bucket(len(encoder_rows[0]), _MIN_LENGTH_BUCKET))
        logits = self._model.logits(self.params, features)
        return np.asarray(logits[:batch, :length], np.float32)

    def score(self, inputs, targets) -> np.ndarray:
        """Sum of target-token log-likelihoods per (input, target) pair, float32 [B].

        Strings are encoded with EOS appended to both (decoder-only: the prompt gets none);
        token arrays are used as given, 0 = padding.
        """
        input_rows, _ = self._token_rows(inputs, "inputs", not self.config.is_decoder_only)
        target_rows, _ = self._token_rows(targets, "targets", True)
        if len(input_rows) != len(target_rows):
            raise DataError(f"score got {len(input_rows)} inputs but {len(target_rows)} targets; "
                            f"pass one target per input")
        if self.config.is_decoder_only:
            features = self._prefix_lm_features(input_rows, target_rows)
        else:
            features = self._encoder_decoder_features(input_rows, target_rows)
        return np.asarray(self._model.score_batch(self.params, features)[:len(input_rows)],
                          np.float32)

    def _encoder_decoder_features(self, input_rows, target_rows) -> dict:
        batch = _bucket(len(input_rows))
        targets = _pad_rows(target_rows, batch,
                            _bucket(max(map(len, target_rows)), _MIN_LENGTH_BUCKET))
        return {
            "encoder_input_tokens": _pad_rows(
                input_rows, batch, _bucket(max(map(len, input_rows)), _MIN_LENGTH_BUCKET)),
            "decoder_input_tokens": _shift_right(targets),
            "decoder_target_tokens": targets,
            "decoder_loss_weights": (targets > 0).astype(np.int32),
        }

    def _prefix_lm_features(self, prompt_rows, target_rows) -> dict:
        """One sequence per pair, prompt then target; the loss covers only the target."""
        batch = _bucket(len(prompt_rows))
        length = _bucket(max(len(p) + len(t) for p, t in zip(prompt_rows, target_rows)),
                         _MIN_LENGTH_BUCKET)
        sequences = _pad_rows([p + t for p, t in zip(prompt_rows, target_rows)], batch, length)
        weights = _pad_rows([[0] * len(p) + [1] * len(t) for p, t in
                             zip(prompt_rows, target_rows)], batch, length)
        # As the prefix-LM feature converter: the shifted prompt plus the slot after it.
        causal = _pad_rows([[1] * (len(p) + 1) if p else [] for p in prompt_rows], batch, length)
        return {"decoder_input_tokens": _shift_right(sequences),
                "decoder_target_tokens": sequences, "decoder_loss_weights": weights,
                "decoder_causal_attention": causal}

    # ------------------------------------------------------------------ generation

    def generate(self, inputs, max_length: int = 64, method: str = "greedy", num_beams: int = 4,
                 temperature: float = 1.0, top_k: int = 0, top_p: float = 0.0, seed: int = 0,
                 alpha: float = 0.6):
        """Decodes each input: strings in -> strings out; token arrays in -> int32 [B, max_length].

        method 'greedy', 'beam' (num_beams, length penalty alpha as T5X) or 'sample'
        (temperature, top_k or top_p, seed). Output tokens stop at EOS and are 0-padded.
        """
        if not isinstance(max_length, int) or max_length < 1:
            raise ConfigError(f"max_length must be an integer >= 1, got {max_length!r}")
        if method not in PREDICT_METHODS:
            raise ConfigError(f"unknown generation method {method!r}; use one of "
                              f"{PREDICT_METHODS}")
        if method == "beam" and num_beams < 1:
            raise ConfigError(f"num_beams must be >= 1 for beam search, got {num_beams}")
        if top_k > 0 and top_p > 0:
            raise ConfigError(f"use top_k or top_p, not both (got top_k={top_k}, "
                              f"top_p={top_p})")
        rows, from_strings = self._token_rows(inputs, "inputs", not self.config.is_decoder_only)
        batch = _bucket(len(rows))
        width = _bucket(max(map(len, rows)), _MIN_LENGTH_BUCKET)
        if self.config.is_decoder_only:
            features = {
                "decoder_input_tokens": _pad_rows([[0] + r for r in rows], batch, width + 1),
                "decoder_causal_attention": _pad_rows([[1] * (len(r) + 1) for r in rows], batch,
                                                      width + 1),
            }
            decode_length = width + max_length
        else:
            features = {"encoder_input_tokens": _pad_rows(rows, batch, width)}
            decode_length = max_length
        tokens = self._model.predict_batch(
            self.params, features, jax.random.PRNGKey(seed), method=method,
            num_decodes=num_beams if method == "beam" else 1, alpha=alpha,
            temperature=temperature, topk=top_k, topp=top_p, max_decode_length=decode_length)
        tokens = np.asarray(tokens, np.int32)[:len(rows), :max_length]
        if from_strings:
            return [self.vocabulary.decode(row.tolist()) for row in tokens]
        return tokens

    # ------------------------------------------------------------------ export

    def save_hf(self, path) -> Path:
        """Writes a directory `transformers.T5ForConditionalGeneration.from_pretrained` loads."""
        vocab_path, extra_ids = None, 0
        if isinstance(self.vocabulary, SentencePieceVocabulary):
            vocab_path, extra_ids = self.vocabulary.path, self.vocabulary.extra_ids
        return huggingface.save_hf_dir(jax.device_get(self.params), self.config, path,
                                       vocab_path=vocab_path, extra_ids=extra_ids)


# ---------------------------------------------------------------------- loading


def _resolve_config(config) -> T5Config | None:
    """None, a T5Config, a preset name ('t5_1_1/small') or a gin file binding T5Config.*."""
    if config is None or isinstance(config, T5Config):
        return config
    if str(config) in PRESETS:
        return get_config(str(config))
    if Path(config).is_file():
        import gin

        gin.parse_config_file(str(config), skip_unknown=True)
        return config_from_gin()
    return get_config(str(config))  # raises ConfigError naming the closest presets


def _hf_vocabulary(path: Path, config: T5Config):
    spiece = path / _SPIECE
    if not spiece.is_file():
        return None
    tokenizer_config = path / "tokenizer_config.json"
    extra_ids = None
    if tokenizer_config.is_file():
        extra_ids = json.loads(tokenizer_config.read_text()).get("extra_ids")
    if extra_ids is None:
        pieces = SentencePieceVocabulary(spiece).vocab_size
        fits = pieces + _HF_DEFAULT_EXTRA_IDS <= config.vocab_size
        extra_ids = _HF_DEFAULT_EXTRA_IDS if fits else 0
    return SentencePieceVocabulary(spiece, extra_ids=extra_ids)


def _load_hf(path: Path, config: T5Config | None) -> Model:
    config, params = huggingface.load_hf_dir(path, config)
    return Model(config, params, _hf_vocabulary(path, config))


def _is_t5forge_checkpoint(path: Path) -> bool:
    from t5forge.training.checkpoints import resolve_step_dir

    try:
        resolve_step_dir(path)
    except CheckpointError:
        return False
    return True


def _load_t5forge(path: Path, config: T5Config | None) -> Model:
    from t5forge.training.checkpoints import METADATA, resolve_step_dir, restore_params

    step_dir = resolve_step_dir(path)
    if config is None:
        metadata_file = step_dir / METADATA / METADATA
        metadata = json.loads(metadata_file.read_text()) if metadata_file.is_file() else {}
        if "model_config" in metadata:
            config = T5Config(**metadata["model_config"])
        elif (step_dir.parent / "config.gin").is_file():
            config = _resolve_config(step_dir.parent / "config.gin")
        else:
            raise ConfigError(f"{step_dir} records no model config; pass config= a preset "
                              f"name or a model gin file")
    params, _ = restore_params(step_dir, build_model(config).abstract_params())
    vocab_file = step_dir.parent / _SPIECE
    metadata_file = step_dir / METADATA / METADATA
    recorded = json.loads(metadata_file.read_text()).get("vocabulary", {}) if metadata_file.is_file() else {}
    vocabulary = (SentencePieceVocabulary(vocab_file, extra_ids=recorded.get("extra_ids", 0))
                  if vocab_file.is_file() else None)
    return Model(config, params, vocabulary)


def _load_t5x(path: Path, config: T5Config | None) -> Model:
    from t5forge.interop.t5x import load_t5x_checkpoint

    if config is None:
        raise ConfigError(f"T5X checkpoint {path} does not record its model config; pass "
                          f"config= a preset name (e.g. 't5_1_1/base') or a model gin file")
    params, _, _ = load_t5x_checkpoint(path)
    return Model(config, stack_layers(params, config))


def _is_t5x_checkpoint(path: Path) -> bool:
    from t5forge.interop.t5x import is_t5x_checkpoint

    return is_t5x_checkpoint(path)


# (name, predicate, loader), tried in order; T5X last since it accepts generic Orbax trees.
_FORMATS = (
    ("Hugging Face (config.json + model.safetensors or pytorch_model.bin)",
     huggingface.is_hf_dir, _load_hf),
    ("t5forge (checkpoint_<step>/state)", _is_t5forge_checkpoint, _load_t5forge),
    ("T5X (msgpack, tensorstore or Orbax checkpoint)", _is_t5x_checkpoint, _load_t5x),
)


def load(path, config=None) -> Model:
    """Loads a Hugging Face model dir, a t5forge checkpoint or a T5X checkpoint as a Model.

    `config` (a preset name like 't5_1_1/small', a model gin file or a T5Config) is needed for
    T5X checkpoints, which do not record it; for the others it overrides the stored config.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path} does not exist; pass a Hugging Face model directory, a "
                              f"t5forge checkpoint or a T5X checkpoint")
    config = _resolve_config(config)
    for _, is_format, loader in _FORMATS:
        if is_format(path):
            return loader(path, config)
    tried = "; ".join(name for name, _, _ in _FORMATS)
    raise CheckpointError(f"{path} is not a checkpoint t5forge recognises; tried {tried}")
