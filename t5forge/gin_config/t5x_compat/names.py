"""Every T5X gin name t5forge understands, and what happens to each of its parameters.

One entry per name T5X's gin files import and bind (`from t5x import utils` ...
`utils.SaveCheckpointConfig.period = 1000`). An entry either forwards to t5forge's configurable
of the same job (its `twin`: bindings move there after parsing, so a command-line override such as
`--gin.utils.DatasetConfig.batch_size=8`, which names the twin, wins; calling the T5X name
calls the twin), or has Python of its own
(`build`, with T5X's signature). The rules (t5forge.gin_config.t5x_compat.rules) say, per parameter,
whether t5forge honours it, moves it, or reports it; docs/t5x-migration.md lists the same.
"""

from __future__ import annotations

import dataclasses
import math

from t5forge.data.providers.tfexample_file_task import create_task_from_tfexample_file
from t5forge.gin_config.t5x_compat import flaxformer_objects, objects
from t5forge.gin_config.t5x_compat.flaxformer_names import MOE, flaxformer_names
from t5forge.gin_config.t5x_compat.name_entry import T5XName
from t5forge.gin_config.t5x_compat.rules import (
    Rule,
    equivalent,
    field,
    honoured,
    keep,
    move,
    reference,
    refers_to,
    resolve_macros,
)

# Reasons, said once each.
FLOAT32 = "t5forge keeps parameters in float32 and computes in T5Config.dtype"
TF_ONLY = "it is a TensorFlow/T5X code path t5forge does not have"
ONE_JOB = "t5forge runs inference as one job over the whole split"
GREEDY = (
    "t5forge's inference evaluation decodes greedily; beam search is available from "
    "the Python API (model.generate(..., method='beam'))"
)
EVAL_LAYOUT = (
    "t5forge's eval and infer run data-parallel on the local devices; "
    "num_partitions applies to train"
)
PARTITIONER = "use partitioning.PjitPartitioner.num_partitions (or mesh_shape=(data, model))"


def _several_paths(value) -> bool:
    return isinstance(value, list | tuple) and len(value) > 1


def _one_path(value):
    if isinstance(value, list | tuple):
        return value[0] if value else None
    return value


def _multi_partition(value) -> bool:
    """Whether any partitioner of the config asks for model parallelism."""
    from t5forge.gin_config import gin_internals

    return any(
        selector.endswith("PjitPartitioner")
        and resolve_macros(params.get("num_partitions", 1)) not in (1, None)
        for (_, selector), params in gin_internals.all_bindings().items()
    )


_DATASET = {
    **{
        p: move()
        for p in (
            "mixture_or_task_name",
            "task_feature_lengths",
            "split",
            "batch_size",
            "shuffle",
            "seed",
            "use_cached",
            "pack",
        )
    },
    "module": move(),  # imported with t5forge's seqio and t5 standing in (t5forge.compat)
    "use_custom_packing_ops": honoured(False, warn="t5forge packs with its own packer"),
    "use_memory_cache": equivalent(),
    "trim_output_features": honoured(True, refuse="t5forge always trims to the feature lengths"),
    "runtime_preprocessors": honoured(
        None, refuse="add the preprocessors to the task's preprocessors instead"
    ),
    "num_prefetch_threads": equivalent(),  # t5forge's loader reads ahead on its own
    "num_workers": equivalent(),
}

_SAVE = {
    "period": move(),
    "keep": move(),
    "dtype": honoured("float32", refuse=FLOAT32),
    "save_dataset": equivalent(),
    "keep_dataset_checkpoints": honoured(
        None, warn="t5forge keeps the data position in every checkpoint it keeps"
    ),
    "checkpoint_steps": honoured(None, refuse="t5forge saves every `period` steps"),
    "state_transformation_fns": honoured((), refuse=TF_ONLY),
    "checkpointer_cls": Rule(
        refuse=True,
        accepts=lambda v: False,
        reason=(
            "custom checkpointers are not supported; for the best checkpoint by a metric use "
            "utils.SaveCheckpointConfig.metric_name_to_monitor"
        ),
    ),
    "checkpoint_manager_cls": Rule(refuse=True, accepts=lambda v: False, reason=TF_ONLY),
    "use_gda": equivalent(),
}

_RESTORE = {
    "path": move(
        convert=_one_path,
        unless=_several_paths,
        refuse=("several paths: evaluate a model dir with mode='all' instead"),
    ),
    "mode": move(),
    "assignment_map": move(convert=objects.params_assignment_map),
    "fallback_to_scratch": move(),
    "dtype": honoured("float32", warn=FLOAT32),
    "restore_dataset": honoured(
        False,
        warn="a run resumes its own data position from "
        "MODEL_DIR; the data position of another run is not restored",
    ),
    "strict": honoured(True, warn="t5forge always checks every parameter's name and shape"),
    # T5X's sparse upcycling (contrib/moe's sparse_upcycle.gin): dense MLPs to every expert.
    "checkpointer_cls": Rule(
        move_to=".checkpointer_cls",
        convert=objects.reference_to("checkpoints.UpcycleCheckpointer"),
        requires="checkpoints.UpcycleCheckpointer",
        accepts=lambda v: refers_to(v, f"{_MOE}.checkpoints.UpcycleCheckpointer"),
        refuse=True,
        reason=TF_ONLY,
        feature=MOE,
        summary="@checkpoints.UpcycleCheckpointer moves to t5forge's (sparse upcycling, "
        f"mixture-of-experts layers); otherwise refused: {TF_ONLY}",
    ),
    "checkpoint_manager_cls": Rule(refuse=True, accepts=lambda v: False, reason=TF_ONLY),
    "state_transformation_fns": honoured((), refuse=TF_ONLY),
    "use_gda": equivalent(),
}


def _submesh_size(submesh) -> int | None:
    """Devices in T5X's model-parallel submesh (x, y, z, core): the model axis' size."""
    return math.prod(submesh) if submesh else None


def _partitions(num_partitions):
    """T5X's PjitPartitioner takes its mesh from model_parallel_submesh when one is set, and
    from num_partitions otherwise; t5forge's model axis gets that many devices."""
    from t5forge.gin_config import gin_internals

    for (_, selector), params in gin_internals.all_bindings().items():
        if selector.endswith("PjitPartitioner") and "model_parallel_submesh" in params:
            size = _submesh_size(resolve_macros(params["model_parallel_submesh"]))
            if size:
                return size
    return num_partitions


_PARTITIONER_COMMON = {
    "params_on_devices": honoured(True, warn="parameters always live on the devices"),
    "backend": honoured(None, warn="t5forge uses JAX's default backend"),
}

_SCRIPT_COMMON = {
    "model": move(),
    "restore_checkpoint_cfg": move(),
    "output_dir": move(),
    "partitioner": Rule(accepts=lambda v: not _multi_partition(v), reason=EVAL_LAYOUT),
    "train_state_initializer_cls": Rule(refuse=True, accepts=lambda v: False, reason=TF_ONLY),
    "fallback_init_rng": honoured(None, warn="the checkpoint must hold every parameter"),
    "use_orbax": equivalent(),
}

_MOE = "t5x.contrib.moe"
_EVALUATOR = reference("seqio.Evaluator", refuse="only seqio.Evaluator is supported")

_T5X_NAMES: tuple[T5XName, ...] = (
    # ---- the three scripts (`import __main__ as train_script`)
    T5XName(
        "__main__",
        "train",
        twin="train",
        rules={
            **{
                p: move()
                for p in (
                    "model",
                    "model_dir",
                    "train_dataset_cfg",
                    "total_steps",
                    "train_eval_dataset_cfg",
                    "infer_eval_dataset_cfg",
                    "checkpoint_cfg",
                    "partitioner",
                    "eval_steps",
                    "eval_period",
                    "stats_period",
                    "run_eval_before_training",
                    "relative_steps",
                )
            },
            "random_seed": move(
                unless=lambda v: v is None,
                warn=(
                    "T5X draws a new seed per run; t5forge uses train.random_seed's default (0) so "
                    "that a resumed run repeats exactly"
                ),
            ),
            "use_hardware_rng": honoured(
                False, warn="t5forge always uses JAX's default (deterministic) random numbers"
            ),
            "trainer_cls": Rule(
                move_to="train.trainer_cls",
                convert=objects.reference_to("trainer.MoeTrainer"),
                requires="trainer.MoeTrainer",
                moves=lambda v: refers_to(v, f"{_MOE}.trainer.MoeTrainer"),
                accepts=lambda v: (
                    refers_to(v, "t5x.trainer.Trainer")
                    or refers_to(v, f"{_MOE}.trainer.MoeTrainer")
                ),
                refuse=True,
                reason="only trainer.Trainer and contrib/moe's MoeTrainer are supported; "
                "t5forge takes custom trainers from Python",
                feature=MOE,
                summary="accepted when @trainer.Trainer; @moe_trainer.MoeTrainer moves to "
                "train.trainer_cls = @trainer.MoeTrainer (mixture-of-experts layers); "
                "otherwise refused: t5forge takes custom trainers from Python",
            ),
            "summarize_config_fn": equivalent(),
            "inference_evaluator_cls": _EVALUATOR,
            "get_dataset_fn": Rule(refuse=True, accepts=lambda v: False, reason=TF_ONLY),
            "train_eval_get_dataset_fn": Rule(refuse=True, accepts=lambda v: False, reason=TF_ONLY),
            "train_state_initializer_cls": _SCRIPT_COMMON["train_state_initializer_cls"],
            "concurrent_metrics": equivalent(),
            "actions": move(
                "train.hooks",
                convert=objects.actions_to_hooks,
                unless=lambda v: not objects.only_train_eval_actions(v),
                refuse="t5forge runs actions after training evaluation only "
                "({'TRAIN_EVAL': [...]})",
            ),
            "use_gda": equivalent(),
            "use_jax_array": equivalent(),
            "use_orbax": equivalent(),
            "verify_matching_vocabs_fn": equivalent(),
            "gc_period": honoured(0, warn="Python's garbage collector runs as usual"),
        },
    ),
    T5XName(
        "__main__",
        "evaluate",
        twin="evaluate",
        rules={
            **_SCRIPT_COMMON,
            "dataset_cfg": move(),
            "inference_evaluator_cls": _EVALUATOR,
            "summarize_config_fn": equivalent(),
            "training_evaluator_cls": honoured(
                None,
                refuse="t5forge's eval computes the inference metrics; teacher-forced "
                "metrics come from train's train_eval_dataset_cfg",
            ),
            "train_eval_get_dataset_fn": Rule(refuse=True, accepts=lambda v: False, reason=TF_ONLY),
        },
    ),
    T5XName(
        "__main__",
        "precompile",
        twin="precompile",
        rules={
            **{p: move() for p in ("model", "model_dir", "train_dataset_cfg", "partitioner")},
            "random_seed": move(),
            "get_dataset_fn": Rule(refuse=True, accepts=lambda v: False, reason=TF_ONLY),
        },
    ),
    T5XName(
        "__main__",
        "create_task_from_tfexample_file",
        build=create_task_from_tfexample_file,
        rules={
            p: keep()
            for p in ("paths", "file_type", "inputs_key", "targets_key", "features", "task_id")
        },
    ),
    T5XName(
        "__main__",
        "infer",
        twin="infer",
        rules={
            **_SCRIPT_COMMON,
            "dataset_cfg": move(),
            "mode": move(),
            "checkpoint_period": move(),
            "shard_id": honoured(0, refuse=ONE_JOB),
            "num_shards": honoured(1, refuse=ONE_JOB),
            "merge_chunked_results": honoured(True, refuse=ONE_JOB),
            "write_fn": Rule(refuse=True, accepts=lambda v: False, reason=TF_ONLY),
            "json_encoder_cls": Rule(refuse=True, accepts=lambda v: False, reason=TF_ONLY),
            "output_vocab_feature_name": honoured(
                "targets", refuse="predictions are decoded with the 'targets' vocabulary"
            ),
            "checkpoint_ds_iter": equivalent(),  # the rows written are the progress marker
            "merge_fn": Rule(refuse=True, accepts=lambda v: False, reason=ONE_JOB),
            "summarize_config_fn": equivalent(),
            "verify_matching_vocabs_fn": equivalent(),
            "file_extension": honoured("jsonl", refuse="t5forge writes JSON lines (.jsonl)"),
            "keep_aux_as_numpy": honoured(False, warn="auxiliary values are written as JSON"),
        },
    ),
    # ---- t5x.utils
    # T5X's files without imports (contrib/gpu's pretrain_pile.gin) bind these under the
    # spelling that is t5forge's: those bindings are T5X's.
    *(
        T5XName("t5x.utils", name, twin=f"utils.{name}", rules=rules, shadowed_by=f"utils.{name}")
        for name, rules in (
            ("DatasetConfig", _DATASET),
            ("SaveCheckpointConfig", _SAVE),
            ("RestoreCheckpointConfig", _RESTORE),
        )
    ),
    T5XName("t5x.utils", "CheckpointConfig", twin="utils.CheckpointConfig", same_object=True),
    T5XName(
        "t5x.utils",
        "create_learning_rate_scheduler",
        twin="utils.create_learning_rate_scheduler",
        same_object=True,
    ),
    # ---- t5x.partitioning
    T5XName(
        "t5x.partitioning",
        "PjitPartitioner",
        twin="partitioning.PjitPartitioner",
        rules={
            "num_partitions": move(convert=_partitions),
            "model_parallel_submesh": move(
                ".num_partitions", convert=lambda v: _submesh_size(v) or 1
            ),
            "logical_axis_rules": move(),
            **_PARTITIONER_COMMON,
            "ici_mesh_shape": honoured(None, refuse=PARTITIONER),
            "dcn_mesh_shape": honoured(None, refuse=PARTITIONER),
        },
    ),
    T5XName(
        "t5x.partitioning",
        "ModelBasedPjitPartitioner",
        build=objects.model_based_pjit_partitioner,
        rules={
            "num_partitions": keep(),
            "logical_axis_rules": keep(),
            "model_parallel_submesh": honoured(None, (), refuse=PARTITIONER),
            **_PARTITIONER_COMMON,
        },
    ),
    T5XName(
        "t5x.partitioning",
        "standard_logical_axis_rules",
        build=objects.standard_logical_axis_rules,
        rules={
            "activation_partitioning_dims": honoured(1, refuse=PARTITIONER),
            "parameter_partitioning_dims": honoured(1, refuse=PARTITIONER),
            "additional_rules": keep(),
        },
    ),
    # ---- t5x.trainer
    T5XName(
        "t5x.trainer",
        "Trainer",
        build=objects.configured_elsewhere(
            "trainer.Trainer", "train.trainer_cls = @trainer.Trainer"
        ),
        rules={
            "num_microbatches": move(  # T5X: None and 0 both mean one batch, unsplit
                "train.num_microbatches", convert=lambda v: v or 1
            ),
            "learning_rate_fn": move("train.learning_rate_fn"),
            "weight_metrics_computer": honoured(None, warn="weight-norm summaries are not written"),
        },
    ),
    T5XName(
        "t5x.trainer",
        "WeightMetricsComputer",
        build=objects.configured_elsewhere(
            "trainer.WeightMetricsComputer", "trainer.Trainer.weight_metrics_computer"
        ),
    ),
    T5XName(
        "t5x.trainer",
        "TerminateOnNanAction",
        build=objects.TerminateOnNanAction,
        rules={"task": keep(), "metric": keep()},
    ),
    # ---- t5x.models
    T5XName(
        "t5x.models",
        "EncoderDecoderModel",
        twin="models.Model",
        shadowed_by="models.EncoderDecoderModel",
        rules={
            "module": move("models.Model.config"),
            **{
                p: move(f"models.Model.{p}")
                for p in ("z_loss", "label_smoothing", "loss_normalizing_factor")
            },
            "optimizer_def": move("train.optimizer"),
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
            "module": move("models.Model.config"),
            **{
                p: move(f"models.Model.{p}")
                for p in ("z_loss", "label_smoothing", "loss_normalizing_factor")
            },
            "optimizer_def": move("train.optimizer"),
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
    # ---- t5x.adafactor
    T5XName(
        "t5x.adafactor",
        "Adafactor",
        twin="adafactor.Adafactor",
        returns_twin=True,
        rules={
            **{
                p: move()
                for p in (
                    "factored",
                    "multiply_by_parameter_scale",
                    "beta1",
                    "decay_rate",
                    "clipping_threshold",
                    "min_dim_size_to_factor",
                    "epsilon1",
                    "epsilon2",
                    "global_norm_clip_threshold",
                )
            },
            "learning_rate": honoured(
                None, warn="the rate comes from trainer.Trainer.learning_rate_fn"
            ),
            "step_offset": honoured(
                0, refuse="use utils.create_learning_rate_scheduler.step_offset"
            ),
            "logical_factor_rules": reference(
                "t5x.adafactor.standard_logical_factor_rules",
                "t5x.contrib.moe.adafactor_utils.logical_factor_rules",
                refuse="t5forge factors by its standard rules",
            ),
            "weight_decay_rate": honoured(None, refuse="use optimizers.adamw for weight decay"),
            "weight_decay_rate_lr_exponent": honoured(None, refuse="use optimizers.adamw"),
            "dtype_momentum": honoured("float32", warn=FLOAT32),
            "factor_map": reference(
                None, "t5x.adafactor.HParamMap", refuse="t5forge factors by logical axes"
            ),
            "max_parameter_scale": honoured(None, refuse=TF_ONLY),
            "skip_nan_updates": honoured(False, warn="use trainer.TerminateOnNanAction"),
        },
    ),
    T5XName(
        "t5x.adafactor",
        "standard_logical_factor_rules",
        build=objects.standard_logical_factor_rules,
    ),
    # Flaxformer's scanned MoE overlay (moe/runs/scan.gin): T5X's factoring by parameter name,
    # scanned layers as a batch axis; t5forge's logical axes already factor them that way.
    T5XName(
        "t5x.adafactor",
        "HParamMap",
        build=objects.configured_elsewhere("adafactor.HParamMap", "adafactor.Adafactor.factor_map"),
        rules={
            "rules": reference(
                "t5x.adafactor.standard_factor_rules",
                refuse="t5forge factors by its logical axis rules",
            )
        },
    ),
    T5XName(
        "t5x.adafactor",
        "standard_factor_rules",
        build=objects.configured_elsewhere(
            "adafactor.standard_factor_rules", "adafactor.HParamMap.rules"
        ),
        rules={"scan_layers": equivalent()},  # a scanned `layers` axis is factored as a batch
    ),
    # ---- t5x.examples.decoder_only.network
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
    # ---- t5x.decoding: named by decode_fn; their settings are the decoding t5forge skips
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
    # ---- t5x.optimizers (optax's transformations are gin's own `import optax`)
    T5XName(
        "t5x.optimizers",
        "chain",
        build=objects.optax_chain,
        rules={"transformations": keep()},
    ),
    # ---- t5x.gin_utils
    T5XName(
        "t5x.gin_utils",
        "summarize_gin_config",
        build=objects.configured_elsewhere(
            "gin_utils.summarize_gin_config", "train.summarize_config_fn; t5forge writes config.gin"
        ),
    ),
    # ---- t5x.examples.t5.network
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
    # ---- seqio
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
    T5XName(
        "seqio",
        "Evaluator",
        build=objects.configured_elsewhere(
            "seqio.Evaluator", "train/evaluate inference_evaluator_cls"
        ),
        rules={
            "logger_cls": equivalent(),
            "num_examples": honoured(None, warn="every example of the split is evaluated"),
            "use_memory_cache": equivalent(),
        },
    ),
    *(
        T5XName(
            "seqio",
            logger,
            build=objects.configured_elsewhere(
                f"seqio.{logger}",
                "seqio.Evaluator.logger_cls; t5forge logs, writes TensorBoard events and JSONL",
            ),
        )
        for logger in ("PyLoggingLogger", "TensorBoardLogger")
    ),
    T5XName(
        "seqio",
        "JSONLogger",
        build=objects.configured_elsewhere("seqio.JSONLogger", "seqio.Evaluator.logger_cls"),
        rules={
            "write_n_results": honoured(None, warn="every prediction is written"),
        },
    ),
)


def _t5x_entry(name: str) -> T5XName:
    return next(entry for entry in _T5X_NAMES if entry.t5x_path == name)


# T5X's contrib/moe: the run files' partitioner, trainer and checkpointer, the model files' model,
# each forwarding to t5forge's namesake (partitioning.MoePjitPartitioner, trainer.MoeTrainer,
# checkpoints.UpcycleCheckpointer).
_MOE_NAMES = (
    T5XName(
        f"{_MOE}.models",
        "MoeEncoderDecoderModel",
        twin="models.Model",
        rules={
            **_t5x_entry("t5x.models.EncoderDecoderModel").rules,
            "aux_loss_factor": field("aux_loss_factor", feature=MOE),
            "router_z_loss_factor": field("router_z_loss_factor", feature=MOE),
        },
    ),
    dataclasses.replace(
        _t5x_entry("t5x.models.EncoderDecoderModel.predict_batch_with_aux"),
        module=f"{_MOE}.models",
        build=objects.configured_elsewhere(
            "models.MoeEncoderDecoderModel.predict_batch_with_aux", "its num_decodes"
        ),
    ),
    T5XName(
        f"{_MOE}.partitioning",
        "MoePjitPartitioner",
        twin="partitioning.MoePjitPartitioner",
        rules={
            **{
                p: dataclasses.replace(rule, feature=MOE) if rule.move_to else rule
                for p, rule in _t5x_entry("t5x.partitioning.PjitPartitioner").rules.items()
            },
            "num_expert_partitions": Rule(move_to=".", feature=MOE),
        },
    ),
    T5XName(
        f"{_MOE}.partitioning",
        "compute_num_model_partitions",
        build=flaxformer_objects.compute_num_model_partitions,
        rules={"num_model_partitions": keep(), "model_parallel_submesh": keep()},
    ),
    T5XName(
        f"{_MOE}.trainer",
        "MoeTrainer",
        build=objects.configured_elsewhere(
            "moe_trainer.MoeTrainer", "train.trainer_cls = @moe_trainer.MoeTrainer"
        ),
        rules={
            **_t5x_entry("t5x.trainer.Trainer").rules,
            "num_expert_partitions": Rule(
                move_to="trainer.MoeTrainer.num_expert_partitions", feature=MOE
            ),
        },
    ),
    T5XName(
        f"{_MOE}.adafactor_utils",
        "logical_factor_rules",
        build=objects.standard_logical_factor_rules,
    ),
    T5XName(
        f"{_MOE}.checkpoints",
        "UpcycleCheckpointer",
        build=objects.configured_elsewhere(
            "checkpoints.UpcycleCheckpointer", "utils.RestoreCheckpointConfig.checkpointer_cls"
        ),
        rules={
            "num_experts": Rule(move_to="checkpoints.UpcycleCheckpointer.num_experts", feature=MOE)
        },
    ),
)

NAMES: tuple[T5XName, ...] = (*_T5X_NAMES, *_MOE_NAMES, *flaxformer_names())

# Flaxformer's enums gin files name as constants (`%moe_enums.LayerLayout.MIXED`).
MODULE_CONSTANTS = {
    "flaxformer.architectures.moe.moe_enums": {"LayerLayout": flaxformer_objects.LayerLayout},
}

# T5X modules whose import registers TensorFlow tasks: importable, empty, and reported.
TASK_MODULES = ("t5.data.mixtures", "t5.data.tasks", "t5x.contrib.gpu.scripts_gpu.seqio_tasks")

# Modules of T5X (and beside it) that t5forge has no stand-in for: why, and what to do.
EXPORT = (
    "T5X's export writes a TensorFlow SavedModel, which t5forge does not write; serve the "
    "checkpoint with `t5forge serve`, or write a Hugging Face model with "
    "`t5forge convert --from t5forge --to hf`"
)
CALM = (
    "CALM (confident adaptive language modeling: early-exit decoding) is a research "
    "architecture t5forge does not build"
)
UNAVAILABLE_MODULES = {
    "t5x.export_lib": EXPORT,
    "t5x.checkpoints": "its checkpoint classes serve T5X's export and checkpointer. " + EXPORT,
    "t5x.contrib.moe": (
        "mixture-of-experts models (T5X's contrib/moe) are not built in t5forge; train a dense "
        "T5 (t5x/examples/t5/...)"
    ),
    "flaxformer.t5x": (
        "its state transformations rename Flaxformer's parameters inside T5X's checkpointer; "
        "t5forge reads T5X and Flaxformer checkpoints by their names "
        "(`t5forge convert --from t5x`)"
    ),
    **dict.fromkeys(("flaxformer.architectures.calm_t5", "t5x.contrib.calm"), CALM),
    "flax.optim": (
        "flax.optim was removed from Flax (0.6); T5X's own code cannot import it either, "
        "its optimizers are t5x.adafactor and optax"
    ),
    "flaxformer.architectures.h_transformer": (
        "H-Transformer-1D (hierarchical attention) is a research architecture t5forge does "
        "not build"
    ),
    "flaxformer.architectures.perceiver_ar": (
        "Perceiver AR (cross-attention to a long prefix) is a research architecture t5forge "
        "does not build"
    ),
    "flaxformer.architectures.fido": (
        "FiDO (layer-sparse decoder cross-attention) is a research architecture t5forge "
        "does not build"
    ),
    "mesh_tensorflow": (
        "this is a Mesh TensorFlow operative config, not a T5X gin file; convert Mesh TF "
        "checkpoints with `t5forge convert --from mesh_tf` and configure a T5X model file"
    ),
}

# T5X's other T5 networks, whose T5Config and Transformer are the same model with more
# fields (all in network.T5Config's rules): the GPU copy and the scanned-layers one.
MODULE_ALIASES = {
    "t5x.contrib.gpu.t5.network": "t5x.examples.t5.network",
    "t5x.examples.scalable_t5.network": "t5x.examples.t5.network",
}


def shadowed_parameters() -> dict[str, set[str]]:
    """t5forge's configurable -> the T5X parameters it accepts while T5X files parse."""
    return {entry.shadowed_by: set(entry.parameters()) for entry in NAMES if entry.shadowed_by}
