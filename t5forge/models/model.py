"""What the trainer, evaluator and API call: params, logits, loss, scores and predictions.

`EncoderDecoderModel` and `DecoderOnlyModel` wrap a network with the T5X model API and the
seqio feature-converter batch names. Params are plain nested dicts of float32 arrays with
T5X's names (no flax boxes); `param_logical_axes` gives their sharding names separately.
Prediction is jitted end to end: encoding (or prompt prefill), the decoding cache and the
decoding loop of `t5forge.models.decoding` compile into one XLA program per shape. For
classification with one-token labels, method 'labels' skips decoding: one decoder step
scores just the label tokens and the argmax is taken on device, so only ids come back.
"""

from __future__ import annotations

import abc
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from t5forge.errors import CheckpointError, ConfigError, DataError
from t5forge.models import decoding, param_names
from t5forge.models.configs import T5Config
from t5forge.models.init_lowering import compact_random_draws
from t5forge.models.losses import loss_and_metrics, token_cross_entropy
from t5forge.models.moe import expert_metrics
from t5forge.models.network import build_network
from t5forge.models.network_layers import CROSS_ATTENTION, DECODE_STEP, INIT_CACHE, PREFILL

PREDICT_METHODS = ("greedy", "beam", "sample", "labels")
_TOKEN_FEATURES = ("encoder_input_tokens", "decoder_input_tokens", "decoder_target_tokens")


def _shift_left(sequences, amount):
    """Moves each row left by amount[row] positions (along the last axis), filling with 0."""
    length = sequences.shape[-1]
    index = jnp.arange(length) + amount.reshape((-1,) + (1,) * (sequences.ndim - 1))
    shifted = jnp.take_along_axis(sequences, jnp.minimum(index, length - 1), axis=-1)
    return jnp.where(index < length, shifted, 0)


class BaseModel(abc.ABC):
    """The network-independent part: params, loss, scoring and the decoding driver.

    A subclass (one per architecture, as T5X's EncoderDecoderModel / DecoderOnlyModel) declares
    which batch features its network reads (`network_inputs`), which ones initialise it
    (`init_inputs`), which ones decoding and label prediction read (`decoding_inputs`,
    `label_inputs`), and provides `decoding_state` (prompt, cache and step function for
    models.decoding) and `_first_target_logits` (for single-token label prediction).
    It also names the feature converter that builds its batches (T5X's FEATURE_CONVERTER_CLS,
    the class name in t5forge.data.feature_converters: models never import data).
    """

    FEATURE_CONVERTER_CLS: str
    network_inputs: tuple[str, ...] = ()
    init_inputs: tuple[str, ...] = ()
    decoding_inputs: tuple[str, ...] = ()
    label_inputs: tuple[str, ...] = ()

    def __init__(
        self,
        config: T5Config,
        *,
        z_loss: float = 1e-4,
        label_smoothing: float = 0.0,
        loss_normalizing_factor=None,
        eos_id: int = 1,
    ):
        self.config = config
        self.z_loss = z_loss
        self.label_smoothing = label_smoothing
        self.loss_normalizing_factor = loss_normalizing_factor
        self.eos_id = eos_id
        self.network = build_network(config)
        self._training_network = build_network(config, deterministic=False)
        self._jit_logits = jax.jit(self._logits)
        self._jit_score = jax.jit(self._score)

    # ------------------------------------------------------------------ params

    def _init_variables(self, rng):
        dummy = jnp.ones((1, 1), jnp.int32)
        return self.network.init({"params": rng}, **{k: dummy for k in self.init_inputs})

    def init_params(self, rng) -> dict:
        """Freshly initialized float32 params (T5X's initializers)."""
        with compact_random_draws():
            return nn.meta.unbox(jax.jit(self._init_variables)(rng)["params"])

    @functools.cached_property
    def _boxed_param_shapes(self):
        """The params' shapes with their axis metadata: one trace of the network's init (a
        second or more for a large model), shared by every question about the params' shapes."""
        return jax.eval_shape(self._init_variables, jax.random.PRNGKey(0))["params"]

    def abstract_params(self) -> dict:
        """The params' shapes and dtypes (jax.ShapeDtypeStruct), without allocating them."""
        return nn.meta.unbox(self._boxed_param_shapes)

    def param_logical_axes(self) -> dict:
        """For every param, the tuple of its logical axis names (e.g. ('embed', 'mlp'))."""
        specs = nn.get_partition_spec(self._boxed_param_shapes)
        return jax.tree_util.tree_map(
            tuple, specs, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec)
        )

    def check_params_match(self, params) -> None:
        """Raises CheckpointError naming the first param whose path or shape differs."""
        mismatch = param_names.shape_mismatch(
            param_names.shapes(self.abstract_params()), param_names.shapes(params)
        )
        if mismatch:
            raise CheckpointError(
                f"the params do not fit this model config: the checkpoint "
                f"{mismatch}; is it the right checkpoint/config pair?"
            )

    # ------------------------------------------------------------------ inputs

    def check_token_ids(self, batch) -> None:
        """DataError if a concrete token feature holds an id outside [0, vocab_size)."""
        for name in _TOKEN_FEATURES:
            value = batch.get(name)
            if value is None or isinstance(value, jax.core.Tracer):
                continue
            value = np.asarray(value)
            if value.size == 0:
                continue
            top, bottom = int(value.max()), int(value.min())
            if top >= self.config.vocab_size or bottom < 0:
                bad = top if top >= self.config.vocab_size else bottom
                raise DataError(
                    f"{name} holds token id {bad} but the model's vocab_size is "
                    f"{self.config.vocab_size} (valid ids 0..{self.config.vocab_size - 1})"
                    "; use the vocabulary the model was built for"
                )

    def _array_features(self, batch) -> dict:
        """The features the jitted forward functions read (others may not be arrays)."""
        wanted = self.network_inputs + ("decoder_loss_weights",)
        return {k: jnp.asarray(batch[k]) for k in wanted if batch.get(k) is not None}

    def _network_kwargs(self, batch) -> dict:
        return {k: jnp.asarray(batch[k]) for k in self.network_inputs if batch.get(k) is not None}

    def _weights(self, batch):
        weights = batch.get("decoder_loss_weights")
        if weights is None:
            return (jnp.asarray(batch["decoder_target_tokens"]) > 0).astype(jnp.float32)
        return jnp.asarray(weights, jnp.float32)

    # ------------------------------------------------------------------ forward

    def _logits(self, params, batch, dropout_rng=None):
        return self._forward(params, batch, dropout_rng)[0]

    def _forward(self, params, batch, dropout_rng=None):
        """(logits, the network's sown 'intermediates': a sparse model's router statistics,
        models/moe.py; empty for a dense one)."""
        network, rngs = self.network, {}
        if dropout_rng is not None:
            network, rngs = self._training_network, {"dropout": dropout_rng}
        if not self.config.is_sparse:
            logits = network.apply({"params": params}, **self._network_kwargs(batch), rngs=rngs)
            return logits, {}
        logits, state = network.apply(
            {"params": params},
            **self._network_kwargs(batch),
            rngs=rngs,
            mutable=["intermediates"],
        )
        return logits, state["intermediates"]

    def logits(self, params, batch):
        """Teacher-forced logits [B, T, vocab] float32 (dropout off)."""
        self.check_token_ids(batch)
        return self._jit_logits(params, self._array_features(batch))

    def loss_fn(self, params, batch, dropout_rng=None):
        """(loss, metrics); dropout is on iff dropout_rng is given. Traceable (jit/grad it).

        A sparse model's loss adds its weighted router losses (T5X's MoE models), reported
        as the 'experts/...' metrics; 'loss' is the total, 'cross_ent_loss' the tokens' part.
        """
        self.check_token_ids(batch)
        logits, intermediates = self._forward(params, batch, dropout_rng)
        segment_ids = batch.get("decoder_segment_ids")
        loss, metrics = loss_and_metrics(
            logits,
            jnp.asarray(batch["decoder_target_tokens"]),
            self._weights(batch),
            z_loss=self.z_loss,
            label_smoothing=self.label_smoothing,
            loss_normalizing_factor=self.loss_normalizing_factor,
            segment_ids=None if segment_ids is None else jnp.asarray(segment_ids),
        )
        if self.config.is_sparse:
            router_loss, router_metrics = expert_metrics(intermediates, self.config)
            loss = loss + router_loss
            metrics = {**metrics, **router_metrics, "loss": loss}
        return loss, metrics

    def _score(self, params, batch):
        logits = self._logits(params, batch)
        token_loss, _ = token_cross_entropy(logits, jnp.asarray(batch["decoder_target_tokens"]))
        return -jnp.sum(token_loss * self._weights(batch), axis=-1)

    def score_batch(self, params, batch, *, run=None):
        """Log-likelihood [B] of each target sequence (sum over its weighted tokens).
        `run(name, jitted, owner, *arguments)` runs the program in place of a plain call: a
        server runs its stored executables this way, or only compiles them (warm-up;
        t5forge.serving.executables)."""
        self.check_token_ids(batch)
        if run is None:
            return self._jit_score(params, self._array_features(batch))
        return run("score", self._jit_score, None, params, self._array_features(batch))

    # ------------------------------------------------------------------ decoding

    @abc.abstractmethod
    def decoding_state(
        self, params, batch, max_decode_length: int, select_cache_reads: bool = False
    ):
        """(decoder prompt int32[B, L], initial cache, tokens_to_logits) for models.decoding.

        tokens_to_logits(token_ids int32[N, 1], cache, step) -> (logits f32[N, V], new cache);
        every cache leaf has the batch as its leading axis, as decoding.py expects.
        `select_cache_reads` is for a step of one row (network_layers.DecoderLayer).
        """

    def _postprocess(self, sequences, prompt):
        return sequences

    @functools.partial(
        jax.jit,
        static_argnums=(0,),
        static_argnames=(
            "method",
            "num_decodes",
            "alpha",
            "temperature",
            "topk",
            "topp",
            "max_decode_length",
        ),
    )
    def _predict(
        self,
        params,
        batch,
        rng,
        *,
        method,
        num_decodes,
        alpha,
        temperature,
        topk,
        topp,
        max_decode_length,
    ):
        prompt, cache, tokens_to_logits = self.decoding_state(params, batch, max_decode_length)
        if method == "beam":
            sequences, scores = decoding.beam_search(
                prompt, cache, tokens_to_logits, self.eos_id, num_decodes=num_decodes, alpha=alpha
            )
        else:
            if method == "greedy":
                temperature, topk, topp = 1.0, 1, 0.0
            sequences, scores = decoding.temperature_sample(
                prompt,
                cache,
                tokens_to_logits,
                self.eos_id,
                rng,
                num_decodes=num_decodes,
                temperature=temperature,
                topk=topk,
                topp=topp,
            )
        return self._postprocess(sequences, prompt), scores

    @abc.abstractmethod
    def _first_target_logits(self, params, batch):
        """Logits [B, vocab] of each row's first target token (traceable)."""

    @functools.partial(jax.jit, static_argnums=(0,))
    def _predict_labels(self, params, batch, label_token_ids):
        log_probs = jax.nn.log_softmax(self._first_target_logits(params, batch), axis=-1)
        label_log_probs = log_probs[:, label_token_ids]
        best = jnp.argmax(label_log_probs, axis=-1)
        return label_token_ids[best][:, None], jnp.max(label_log_probs, axis=-1)

    def predict_labels(self, params, batch, label_token_ids):
        """(label ids int32 [B, 1], their log-probabilities [B]): the most likely of the
        given one-token labels as each row's first target token, chosen on device."""
        ids = np.asarray(label_token_ids, np.int32).reshape(-1)
        if ids.size == 0:
            raise ConfigError("method 'labels' needs label_token_ids, the token id of each label")
        if ids.min() < 0 or ids.max() >= self.config.vocab_size:
            raise ConfigError(
                f"label_token_ids {ids.tolist()} must lie in [0, "
                f"{self.config.vocab_size}), the model's vocabulary"
            )
        self.check_token_ids(batch)
        inputs = {k: jnp.asarray(v) for k, v in batch.items() if k in self.label_inputs}
        return self._predict_labels(params, inputs, jnp.asarray(ids))

    def predict_batch_with_aux(
        self,
        params,
        batch,
        rng=None,
        method: str = "greedy",
        num_decodes: int | None = None,
        alpha: float = 0.6,
        temperature: float = 1.0,
        topk: int = 1,
        topp: float = 0.0,
        max_decode_length: int | None = None,
        return_all_decodes: bool = False,
        label_token_ids=None,
        *,
        run=None,
    ):
        """(tokens [B, L], {'scores': [B]}) for the best decode of each row, or with
        return_all_decodes all of them, [B, num_decodes, L] and [B, num_decodes], best last.

        num_decodes defaults to 4 beams for 'beam' and 1 otherwise; L is max_decode_length,
        or the length of the batch's decoder_input_tokens. method 'labels' returns the best
        of `label_token_ids` per row ([B, 1], see predict_labels) instead of decoding.
        `run` runs the decoding program in place of a plain call, as for `score_batch`
        (None when it only compiled it).
        """
        if method not in PREDICT_METHODS:
            raise ConfigError(f"unknown decoding method {method!r}; use one of {PREDICT_METHODS}")
        if method == "labels":
            if label_token_ids is None:
                raise ConfigError(
                    "method 'labels' needs label_token_ids, the token id of each label"
                )
            labels, scores = self.predict_labels(params, batch, label_token_ids)
            return labels, {"scores": scores}
        if num_decodes is None:
            num_decodes = 4 if method == "beam" else 1
        self.check_token_ids(batch)
        if max_decode_length is None and "decoder_input_tokens" not in batch:
            raise DataError(
                "predict_batch needs max_decode_length or a decoder_input_tokens "
                "feature to know how many tokens to decode"
            )
        length = max_decode_length or np.shape(batch["decoder_input_tokens"])[1]
        inputs = {k: jnp.asarray(v) for k, v in batch.items() if k in self.decoding_inputs}
        static = {
            "method": method,
            "num_decodes": num_decodes,
            "alpha": float(alpha),
            "temperature": float(temperature),
            "topk": int(topk),
            "topp": float(topp),
            "max_decode_length": int(length),
        }
        if run is None:
            sequences, scores = self._predict(params, inputs, rng, **static)
        elif outputs := run("predict", type(self)._predict, self, params, inputs, rng, **static):
            sequences, scores = outputs
        else:
            return None
        if return_all_decodes:
            return sequences, {"scores": scores}
        return sequences[:, -1], {"scores": scores[:, -1]}

    def predict_batch(self, params, batch, rng=None, **options):
        """Decoded tokens [B, L] (0 after EOS); options as predict_batch_with_aux."""
        return self.predict_batch_with_aux(params, batch, rng, **options)[0]


class EncoderDecoderModel(BaseModel):
    """T5 with an encoder: predicts targets from `encoder_input_tokens`."""

    FEATURE_CONVERTER_CLS = "EncDecFeatureConverter"
    network_inputs = (
        "encoder_input_tokens",
        "decoder_input_tokens",
        "decoder_target_tokens",
        "encoder_segment_ids",
        "decoder_segment_ids",
    )
    decoding_inputs = ("encoder_input_tokens",)
    init_inputs = ("encoder_input_tokens", "decoder_input_tokens", "decoder_target_tokens")
    label_inputs = ("encoder_input_tokens",)

    def _first_target_logits(self, params, batch):
        encoder_tokens = jnp.asarray(batch["encoder_input_tokens"], jnp.int32)
        start = jnp.zeros((encoder_tokens.shape[0], 1), jnp.int32)
        # The target only marks the position as valid (masks); its value is not read.
        logits = self.network.apply({"params": params}, encoder_tokens, start, start + 1)
        return logits[:, 0]

    def decoding_state(
        self, params, batch, max_decode_length: int, select_cache_reads: bool = False
    ):
        encoder_tokens = jnp.asarray(batch["encoder_input_tokens"], jnp.int32)
        init_network = build_network(
            self.config, decode_mode=INIT_CACHE, cache_length=max_decode_length
        )
        _, variables = init_network.apply(
            {"params": params}, encoder_tokens, method="init_cache", mutable=["cache"]
        )
        per_row, cross = _split_cross_attention(variables["cache"])
        cache = decoding.DecodingCache(
            per_row=per_row,
            per_input={"network": cross, "encoder_valid": encoder_tokens > 0},
            # The self-attention caches are read through a lineage: beams need not copy them.
            lineage=jnp.zeros((encoder_tokens.shape[0], 1, max_decode_length), jnp.int32),
        )
        step_network = build_network(
            self.config,
            decode_mode=DECODE_STEP,
            cache_length=max_decode_length,
            select_cache_reads=select_cache_reads,
        )

        def tokens_to_logits(token_ids, cache, step):
            network_cache = _merge_caches(cache.per_row, cache.per_input["network"])
            logits, variables = step_network.apply(
                {"params": params, "cache": network_cache},
                token_ids,
                step,
                cache.per_input["encoder_valid"],
                cache.lineage,
                method="decode_step",
                mutable=["cache"],
            )
            per_row, _ = _split_cross_attention(variables["cache"])
            return logits[:, 0], cache._replace(per_row=per_row)

        prompt = jnp.zeros((encoder_tokens.shape[0], max_decode_length), jnp.int32)
        return prompt, cache, tokens_to_logits


def _split_cross_attention(cache: dict) -> tuple[dict, dict]:
    """(self-attention entries, cross-attention entries) of a decoder's flax cache.

    Cross-attention keys/values depend only on the input, so the decodes of one input share
    them (decoding.DecodingCache.per_input); the self-attention slots belong to each row.
    """
    flat = traverse_util.flatten_dict(cache)
    cross = {path: leaf for path, leaf in flat.items() if CROSS_ATTENTION in path}
    own = {path: leaf for path, leaf in flat.items() if CROSS_ATTENTION not in path}
    return traverse_util.unflatten_dict(own), traverse_util.unflatten_dict(cross)


def _merge_caches(*caches: dict) -> dict:
    """One flax cache collection from disjoint parts (the inverse of the split above)."""
    flat = {}
    for cache in caches:
        flat.update(traverse_util.flatten_dict(cache))
    return traverse_util.unflatten_dict(flat)


class DecoderOnlyModel(BaseModel):
    """A (prefix-)LM: the prompt is the part of `decoder_input_tokens` under
    `decoder_causal_attention`, attended bidirectionally as in training; predictions return
    only the continuation."""

    FEATURE_CONVERTER_CLS = "PrefixLMFeatureConverter"
    network_inputs = (
        "decoder_input_tokens",
        "decoder_target_tokens",
        "decoder_segment_ids",
        "decoder_causal_attention",
    )
    decoding_inputs = ("decoder_input_tokens", "decoder_causal_attention")
    init_inputs = ("decoder_input_tokens", "decoder_target_tokens")
    label_inputs = ("decoder_input_tokens", "decoder_target_tokens", "decoder_causal_attention")

    def _first_target_logits(self, params, batch):
        # The prefix-LM converter marks inputs + 1 positions as causal; the last of them
        # is where the first target token is predicted.
        causal = jnp.asarray(batch["decoder_causal_attention"], jnp.int32)
        logits = self.network.apply(
            {"params": params}, **{k: jnp.asarray(batch[k]) for k in self.label_inputs}
        )
        last_prefix = jnp.maximum(jnp.sum(causal, axis=1) - 1, 0)
        return jnp.take_along_axis(logits, last_prefix[:, None, None], axis=1)[:, 0]

    def decoding_state(
        self, params, batch, max_decode_length: int, select_cache_reads: bool = False
    ):
        tokens = jnp.asarray(batch["decoder_input_tokens"], jnp.int32)
        causal = batch.get("decoder_causal_attention")
        causal = jnp.zeros_like(tokens) if causal is None else jnp.asarray(causal, jnp.int32)
        pad = max_decode_length - tokens.shape[1]
        if pad < 0:
            raise ConfigError(
                f"max_decode_length {max_decode_length} is shorter than the "
                f"decoder inputs ({tokens.shape[1]}); raise it"
            )
        prompt = jnp.pad(tokens * causal, ((0, 0), (0, pad)))
        causal = jnp.pad(causal, ((0, 0), (0, pad)))
        prefill_network = build_network(self.config, decode_mode=PREFILL)
        _, variables = prefill_network.apply(
            {"params": params}, prompt, causal, method="prefill", mutable=["cache"]
        )
        cache = decoding.DecodingCache(
            per_row={
                "network": variables["cache"],
                "prefix_length": jnp.sum(causal, axis=1, dtype=jnp.int32),
            },
            per_input={},
            # Every beam holds the same prompt; later positions are read through the lineage.
            lineage=jnp.zeros((tokens.shape[0], 1, max_decode_length), jnp.int32),
        )
        step_network = build_network(
            self.config,
            decode_mode=DECODE_STEP,
            cache_length=max_decode_length,
            select_cache_reads=select_cache_reads,
        )

        def tokens_to_logits(token_ids, cache, step):
            # Prompt positions keep the prefill's (bidirectional) keys and values.
            write = step >= cache.per_row["prefix_length"]
            logits, variables = step_network.apply(
                {"params": params, "cache": cache.per_row["network"]},
                token_ids,
                step,
                write,
                cache.lineage,
                method="decode_step",
                mutable=["cache"],
            )
            per_row = {**cache.per_row, "network": variables["cache"]}
            return logits[:, 0], cache._replace(per_row=per_row)

        return prompt, cache, tokens_to_logits

    def _postprocess(self, sequences, prompt):
        prompt_length = jnp.sum(prompt[:, 1:] != 0, axis=1)
        return _shift_left(sequences, prompt_length)


def build_model(config: T5Config, **options) -> BaseModel:
    """The model for `config`; options: z_loss, label_smoothing, loss_normalizing_factor, eos_id."""
    model_cls = DecoderOnlyModel if config.is_decoder_only else EncoderDecoderModel
    return model_cls(config, **options)
