"""T5X's scripts (`import __main__ as train_script`) and the run records they take.

The entries of T5X's `train`, `evaluate`, `infer` and `precompile` and of `t5x.utils`
(DatasetConfig, SaveCheckpointConfig, RestoreCheckpointConfig, ...) forward to t5forge's
commands and run records of the same job; seqio's Evaluator and loggers, and gin_utils'
config summary, are named by the scripts and configured by t5forge itself. (See names.py for
what an entry is.)
"""

from __future__ import annotations

from t5forge.data.providers.tfexample_file_task import create_task_from_tfexample_file
from t5forge.gin_config.t5x_compat import objects
from t5forge.gin_config.t5x_compat.flaxformer_names import MOE
from t5forge.gin_config.t5x_compat.moe_names import T5X_MOE
from t5forge.gin_config.t5x_compat.name_entry import T5XName
from t5forge.gin_config.t5x_compat.rules import (
    FLOAT32,
    TF_ONLY,
    Rule,
    equivalent,
    honoured,
    keep,
    move,
    reference,
    refers_to,
    refused,
    resolve_macros,
)
from t5forge.gin_config.t5x_compat.training_names import partitioner_bindings

ONE_JOB = "t5forge runs inference as one job over the whole split"
EVAL_LAYOUT = (
    "t5forge's eval and infer run data-parallel on the local devices; "
    "num_partitions applies to train"
)


def _several_paths(value) -> bool:
    return isinstance(value, list | tuple) and len(value) > 1


def _one_path(value):
    if isinstance(value, list | tuple):
        return value[0] if value else None
    return value


def _multi_partition(value) -> bool:
    """Whether any partitioner of the config asks for model parallelism."""
    return any(
        resolve_macros(params.get("num_partitions", 1)) not in (1, None)
        for params in partitioner_bindings()
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
    "checkpointer_cls": refused(
        "custom checkpointers are not supported; for the best checkpoint by a metric use "
        "utils.SaveCheckpointConfig.metric_name_to_monitor"
    ),
    "checkpoint_manager_cls": refused(TF_ONLY),
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
        accepts=lambda v: refers_to(v, f"{T5X_MOE}.checkpoints.UpcycleCheckpointer"),
        refuse=True,
        reason=TF_ONLY,
        feature=MOE,
        summary="@checkpoints.UpcycleCheckpointer moves to t5forge's (sparse upcycling, "
        f"mixture-of-experts layers); otherwise refused: {TF_ONLY}",
    ),
    "checkpoint_manager_cls": refused(TF_ONLY),
    "state_transformation_fns": honoured((), refuse=TF_ONLY),
    "use_gda": equivalent(),
}

_SCRIPT_COMMON = {
    "model": move(),
    "restore_checkpoint_cfg": move(),
    "output_dir": move(),
    "partitioner": Rule(accepts=lambda v: not _multi_partition(v), reason=EVAL_LAYOUT),
    "train_state_initializer_cls": refused(TF_ONLY),
    "fallback_init_rng": honoured(None, warn="the checkpoint must hold every parameter"),
    "use_orbax": equivalent(),
}
_EVALUATOR = reference("seqio.Evaluator", refuse="only seqio.Evaluator is supported")

SCRIPTS: tuple[T5XName, ...] = (
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
                moves=lambda v: refers_to(v, f"{T5X_MOE}.trainer.MoeTrainer"),
                accepts=lambda v: (
                    refers_to(v, "t5x.trainer.Trainer")
                    or refers_to(v, f"{T5X_MOE}.trainer.MoeTrainer")
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
            "get_dataset_fn": refused(TF_ONLY),
            "train_eval_get_dataset_fn": refused(TF_ONLY),
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
            "train_eval_get_dataset_fn": refused(TF_ONLY),
        },
    ),
    T5XName(
        "__main__",
        "precompile",
        twin="precompile",
        rules={
            **{p: move() for p in ("model", "model_dir", "train_dataset_cfg", "partitioner")},
            "random_seed": move(),
            "get_dataset_fn": refused(TF_ONLY),
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
            "write_fn": refused(TF_ONLY),
            "json_encoder_cls": refused(TF_ONLY),
            "output_vocab_feature_name": honoured(
                "targets", refuse="predictions are decoded with the 'targets' vocabulary"
            ),
            "checkpoint_ds_iter": equivalent(),  # the rows written are the progress marker
            "merge_fn": refused(ONE_JOB),
            "summarize_config_fn": equivalent(),
            "verify_matching_vocabs_fn": equivalent(),
            "file_extension": honoured("jsonl", refuse="t5forge writes JSON lines (.jsonl)"),
            "keep_aux_as_numpy": honoured(False, warn="auxiliary values are written as JSON"),
        },
    ),
)

UTILS: tuple[T5XName, ...] = (
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
)

GIN_UTILS: tuple[T5XName, ...] = (
    T5XName(
        "t5x.gin_utils",
        "summarize_gin_config",
        build=objects.configured_elsewhere(
            "gin_utils.summarize_gin_config", "train.summarize_config_fn; t5forge writes config.gin"
        ),
    ),
)

# seqio's evaluation, named by the scripts' inference_evaluator_cls.
EVALUATION: tuple[T5XName, ...] = (
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
