"""T5X's models, networks, decoding functions and vocabularies: `t5x.models`, T5X's T5 and
decoder-only example networks, `t5x.decoding` and seqio's vocabularies, forwarding to t5forge's
model and T5Config. t5forge's inference evaluation decodes greedily, so the decoding settings
are reported. (See names.py for what an entry is.)
"""

from __future__ import annotations

from t5forge.gin_config.t5x_compat import objects
from t5forge.gin_config.t5x_compat.name_entry import T5XName
from t5forge.gin_config.t5x_compat.rules import (
    TF_ONLY,
    Rule,
    equivalent,
    honoured,
    keep,
    move,
)

GREEDY = (
    "t5forge's inference evaluation decodes greedily; beam search is available from "
    "the Python API (model.generate(..., method='beam'))"
)

# What T5X's encoder-decoder and decoder-only models share.
_MODEL_COMMON = {
    "module": move("models.Model.config"),
    **{
        p: move(f"models.Model.{p}")
        for p in ("z_loss", "label_smoothing", "loss_normalizing_factor")
    },
    "optimizer_def": move("train.optimizer"),
}

MODELS: tuple[T5XName, ...] = (
    T5XName(
        "t5x.models",
        "EncoderDecoderModel",
        twin="models.Model",
        shadowed_by="models.EncoderDecoderModel",
        rules={
            **_MODEL_COMMON,
            # Read back by models.get_input_vocabulary (infer_from_tfexample_file.gin).
            "input_vocabulary": move("t5x.models.get_input_vocabulary.vocabulary"),
            "output_vocabulary": move("t5x.models.get_output_vocabulary.vocabulary"),
            "feature_converter_cls": honoured(
                None,
                refuse="t5forge picks the feature converter "
                "from the architecture; pre-packed features are not "
                "supported",
            ),
            "decode_fn": Rule(accepts=lambda v: False, reason=GREEDY),
            "default_decoder_params": honoured(None, warn=GREEDY),
        },
    ),
    T5XName(
        "t5x.models",
        "DecoderOnlyModel",
        twin="models.Model",
        shadowed_by="models.DecoderOnlyModel",
        rules={
            **_MODEL_COMMON,
            "vocabulary": equivalent(),
            "decode_fn": Rule(accepts=lambda v: False, reason=GREEDY),
            "inputs_bidirectional_attention": honoured(
                True,
                refuse="t5forge's decoder-only model trains on inputs as a prefix LM, attending "
                "to the whole inputs (T5X's inputs_bidirectional_attention = True)",
            ),
            "feature_converter_cls": honoured(
                None, refuse="t5forge picks the feature converter from the architecture"
            ),
        },
    ),
    *(
        T5XName(
            "t5x.models",
            f"{model}.predict_batch_with_aux",
            build=objects.configured_elsewhere(
                f"models.{model}.predict_batch_with_aux", "its num_decodes"
            ),
            rules={
                "num_decodes": honoured(1, warn=GREEDY),
                "return_all_decodes": honoured(False, warn=GREEDY),
                "decoder_params": honoured(None, warn=GREEDY),
                "prompt_with_targets": honoured(False, refuse=GREEDY),
            },
        )
        for model in ("EncoderDecoderModel", "DecoderOnlyModel")
    ),
    *(
        T5XName(
            "t5x.models",
            f"get_{side}_vocabulary",
            build=objects.model_vocabulary(side),
            # t5forge's model holds no vocabulary: the one MODEL's file binds moves here.
            rules={"model": equivalent(), "vocabulary": keep()},
        )
        for side in ("input", "output")
    ),
)

DECODER_ONLY_NETWORK: tuple[T5XName, ...] = (
    T5XName(
        "t5x.examples.decoder_only.network",
        "TransformerConfig",
        build=objects.decoder_only_config,
        rules={
            p: keep()
            for p in (
                "vocab_size",
                "dtype",
                "emb_dim",
                "num_heads",
                "num_layers",
                "head_dim",
                "mlp_dim",
                "mlp_activations",
                "dropout_rate",
                "logits_via_embedding",
            )
        },
    ),
    T5XName(
        "t5x.examples.decoder_only.network",
        "DecoderWrapper",
        build=objects.decoder_wrapper,
        rules={"config": keep()},
    ),
)

# Named by decode_fn; their settings are the decoding t5forge skips.
DECODING: tuple[T5XName, ...] = (
    *(
        T5XName(
            "t5x.decoding",
            name,
            build=objects.decoding_function(name),
            rules={p: honoured(default, warn=GREEDY) for p, default in defaults.items()},
        )
        for name, defaults in (
            ("temperature_sample", {"num_decodes": 1, "temperature": 1.0, "topk": 1, "topp": 0.0}),
            ("beam_search", {"num_decodes": 4, "alpha": 0.6}),
        )
    ),
)

T5_NETWORK: tuple[T5XName, ...] = (
    T5XName(
        "t5x.examples.t5.network",
        "T5Config",
        twin="T5Config",
        rules={
            **{
                p: move()
                for p in (
                    "vocab_size",
                    "emb_dim",
                    "num_heads",
                    "num_encoder_layers",
                    "num_decoder_layers",
                    "head_dim",
                    "mlp_dim",
                    "mlp_activations",
                    "dropout_rate",
                    "logits_via_embedding",
                    "dtype",
                    "remat_policy",
                    "scan_layers",
                )
            },
            "param_scan_axis": honoured(
                1,
                warn="t5forge stacks scanned layers on axis 0 of each parameter; "
                "the axis only changes how a checkpoint lays them out",
            ),
            "float32_attention_logits": honoured(
                False, warn="attention logits are computed in T5Config.dtype"
            ),
            "scale_attn_logits": move(),
        },
    ),
    T5XName(
        "t5x.examples.t5.network",
        "Transformer",
        build=objects.transformer,
        rules={"config": keep()},
        builds_config=True,
    ),
)

VOCABULARIES: tuple[T5XName, ...] = (
    T5XName(
        "seqio",
        "SentencePieceVocabulary",
        build=objects.sentencepiece_vocabulary,
        rules={
            "sentencepiece_model_file": keep(),
            "extra_ids": keep(),
            "normalizer_spec_overrides": honoured(None, refuse=TF_ONLY),
            "reverse_extra_ids": honoured(
                True, refuse="sentinels are always numbered from the end"
            ),
            "use_fast_tokenizer": equivalent(),
        },
    ),
    T5XName("seqio", "ByteVocabulary", build=objects.byte_vocabulary, rules={"extra_ids": keep()}),
)
