"""The T5X configurables that are more than a new name for one of t5forge's.

Each takes T5X's parameters (the ones its gin files bind) and returns what t5forge uses in
that place: `network.Transformer(config)` is just its T5Config (t5forge builds the network
from the config), `partitioning.ModelBasedPjitPartitioner` is a PjitPartitioner,
`trainer.TerminateOnNanAction` is a training hook, `seqio.SentencePieceVocabulary` is
t5forge's vocabulary under SeqIO's signature.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from t5forge.errors import ConfigError, T5ForgeError
from t5forge.gin_config.gin_registry import config_from_gin
from t5forge.models.configs import T5Config
from t5forge.run.hooks import Hook
from t5forge.training import optimizers, partitioning


def transformer(config: T5Config | None = None) -> T5Config:
    """T5X's `network.Transformer(config=...)`: t5forge builds the network from its config."""
    return config or config_from_gin()


def decoder_only_config(
    vocab_size: int,
    dtype="float32",
    emb_dim: int = 512,
    num_heads: int = 8,
    num_layers: int = 6,
    head_dim: int = 64,
    mlp_dim: int = 2048,
    mlp_activations: Sequence[str] = ("relu",),
    dropout_rate: float = 0.1,
    logits_via_embedding: bool = False,
) -> T5Config:
    """T5X's decoder-only `network.TransformerConfig` (defaults T5X's): t5forge's T5Config
    of the decoder-only architecture, `num_layers` decoder layers."""
    return T5Config(
        architecture="decoder_only",
        vocab_size=vocab_size,
        dtype=dtype,
        emb_dim=emb_dim,
        num_heads=num_heads,
        num_encoder_layers=0,
        num_decoder_layers=num_layers,
        head_dim=head_dim,
        mlp_dim=mlp_dim,
        mlp_activations=tuple(mlp_activations),
        dropout_rate=dropout_rate,
        logits_via_embedding=logits_via_embedding,
    )


def decoder_wrapper(config: T5Config) -> T5Config:
    """T5X's `network.DecoderWrapper(config=...)`: t5forge builds the network from its config."""
    return config


def decoding_function(name: str):
    """T5X's `decoding.temperature_sample` / `beam_search`, named as a model's decode_fn: the
    model's rule reports what t5forge decodes with; the function itself is never called."""

    def decode(**unused):
        raise ConfigError(f"decoding.{name} is named by a model's decode_fn, not called")

    decode.__name__ = decode.__qualname__ = name
    return decode


def model_based_pjit_partitioner(
    num_partitions: int = 1,
    model_parallel_submesh=None,
    params_on_devices: bool = True,
    backend=None,
    logical_axis_rules=(),
) -> partitioning.PjitPartitioner:
    """T5X's older partitioner name; same mesh as `PjitPartitioner(num_partitions=...)`."""
    return partitioning.PjitPartitioner(
        num_partitions=num_partitions, logical_axis_rules=logical_axis_rules or ()
    )


def standard_logical_axis_rules(
    activation_partitioning_dims: int = 1,
    parameter_partitioning_dims: int = 1,
    additional_rules: Sequence = (),
) -> tuple:
    """T5X's rule set: t5forge's PjitPartitioner starts from the same standard rules, so only
    `additional_rules` are passed on (as overrides)."""
    return tuple(tuple(rule) for rule in additional_rules or ())


def optax_chain(transformations: Sequence):
    """T5X's `optimizers.chain([@optax.clip(), @optax.adamw()])`: optax transformations in
    order, as t5forge's optimizer factory. The learning rate is what the optax transformations
    were given (a number or an optax schedule), as in T5X; the trainer's learning_rate_fn
    is then only logged."""
    import optax

    transformation = optax.chain(*transformations)

    def optimizer(learning_rate_fn):
        return transformation

    return optimizer


def standard_logical_factor_rules() -> dict[str, str]:
    """T5X's Adafactor factoring rules; t5forge's Adafactor uses the same ones."""
    return dict(optimizers.LOGICAL_FACTOR_RULES)


def sentencepiece_vocabulary(
    sentencepiece_model_file: str,
    extra_ids: int | None = None,
    normalizer_spec_overrides=None,
    reverse_extra_ids: bool = True,
    use_fast_tokenizer: bool = False,
):
    """`seqio.SentencePieceVocabulary` in a gin file: t5forge's vocabulary."""
    from t5forge.seqio import SentencePieceVocabulary

    return SentencePieceVocabulary(sentencepiece_model_file, extra_ids)


def model_vocabulary(side: str):
    """T5X's `models.get_{side}_vocabulary(model)`: the vocabulary MODEL's file binds
    (`models.EncoderDecoderModel.{side}_vocabulary`), which translation moves here."""

    def get(model=None, vocabulary=None):
        if vocabulary is None:
            raise ConfigError(
                f"models.get_{side}_vocabulary: MODEL binds no {side} vocabulary; bind "
                f"models.EncoderDecoderModel.{side}_vocabulary (e.g. = %VOCABULARY)"
            )
        return vocabulary

    return get


def byte_vocabulary(extra_ids: int = 0):
    """`seqio.ByteVocabulary` in a gin file (ByT5)."""
    from t5forge.data.vocabularies import ByteVocabulary

    return ByteVocabulary(extra_ids)


class TerminateOnNanAction(Hook):
    """T5X's `trainer.TerminateOnNanAction(task, metric)`: stops the run with an error when the
    training-eval `metric` of `task` is NaN (or infinite), before the state is saved."""

    def __init__(self, task: str, metric: str = "loss"):
        self.key = f"training_eval/{task}/{metric}"

    def on_eval(self, run, step: int, results: dict) -> None:
        value = results.get(self.key)
        if value is not None and not math.isfinite(float(value)):
            raise T5ForgeError(
                f"{self.key} is {value} at step {step} "
                "(trainer.TerminateOnNanAction); the run stops without saving"
            )


def actions_to_hooks(actions) -> list:
    """T5X's `train.actions` ({'TRAIN_EVAL': [@trainer.TerminateOnNanAction()]}) as hooks."""
    return list(actions.get("TRAIN_EVAL", []))


def only_train_eval_actions(actions) -> bool:
    """Whether t5forge can run these actions: hooks see training-eval results only."""
    return isinstance(actions, dict) and set(actions) <= {"TRAIN_EVAL"}


def params_assignment_map(pairs):
    """T5X's `RestoreCheckpointConfig.assignment_map` on t5forge's parameter names: T5X
    matches paths of its train state (`target/encoder/...` for parameters,
    `state/param_states/...` for the optimizer), t5forge the parameter names themselves
    (`encoder/...`; the optimizer starts fresh). So `target` leaves patterns and replacements,
    and optimizer-state entries go."""
    if not pairs:
        return pairs
    converted = []
    for pattern, replacement in pairs:
        if pattern.startswith("state"):
            continue
        if pattern.startswith("target"):
            pattern = pattern.removeprefix("target")
            if replacement is not None:
                replacement = replacement.removeprefix("target")
        converted.append((pattern, replacement))
    return tuple(converted)


def reference_to(selector: str):
    """A converter to `@selector` (t5forge's configurable, uncalled): T5X's name of a class
    becomes t5forge's, which gin configures when the run calls it."""
    import gin

    def convert(value):
        return gin.config.ConfigurableReference(selector, evaluate=False)

    return convert


def configured_elsewhere(t5x_name: str, where: str):
    """The Python behind a T5X name whose bindings all move elsewhere (`trainer.Trainer` ->
    `train`): calling it means a config uses it in a place t5forge does not translate."""

    def call(**unused):
        raise ConfigError(
            f"{t5x_name} is only translated where T5X's run files use it "
            f"({where}); see docs/t5x-migration.md"
        )

    return call
