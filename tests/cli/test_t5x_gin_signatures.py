"""T5X's configurables, whole: every parameter of every T5X name its gin files bind has a rule
(t5forge.gin_config.t5x_compat.names) saying what t5forge does with it.

The signatures are T5X's at cc342d4 (google-research/t5x: t5x/train.py, eval.py, infer.py,
utils.py, trainer.py, partitioning.py, models.py, adafactor.py, examples/*/network.py),
copied here; when T5X adds a parameter, adding it to this table makes a failing row until
names.py gives it a rule. Parameters T5X's own code passes at run time (the trainer's model,
train state, ...) are no gin binding and need none.
"""

from __future__ import annotations

import inspect

import pytest

from t5forge.gin_config.t5x_compat.names import NAMES

T5X_SIGNATURES = {
    "__main__.train": (
        "model train_dataset_cfg train_eval_dataset_cfg infer_eval_dataset_cfg checkpoint_cfg "
        "partitioner trainer_cls model_dir total_steps eval_steps eval_period relative_steps "
        "stats_period random_seed use_hardware_rng summarize_config_fn inference_evaluator_cls "
        "get_dataset_fn concurrent_metrics actions train_eval_get_dataset_fn "
        "run_eval_before_training train_state_initializer_cls use_orbax "
        "verify_matching_vocabs_fn gc_period"
    ),
    "__main__.evaluate": (
        "model dataset_cfg restore_checkpoint_cfg partitioner output_dir "
        "inference_evaluator_cls training_evaluator_cls summarize_config_fn "
        "train_state_initializer_cls train_eval_get_dataset_fn fallback_init_rng use_orbax"
    ),
    "__main__.infer": (
        "mode model dataset_cfg restore_checkpoint_cfg partitioner output_dir "
        "checkpoint_period shard_id num_shards merge_chunked_results write_fn "
        "checkpoint_ds_iter train_state_initializer_cls fallback_init_rng merge_fn "
        "summarize_config_fn verify_matching_vocabs_fn output_vocab_feature_name "
        "file_extension keep_aux_as_numpy use_orbax"
    ),
    "__main__.precompile": (
        "model train_dataset_cfg partitioner model_dir random_seed get_dataset_fn"
    ),
    "__main__.create_task_from_tfexample_file": (
        "paths file_type inputs_key targets_key features task_id"
    ),
    "t5x.models.get_input_vocabulary": "model",
    "t5x.models.get_output_vocabulary": "model",
    "t5x.utils.DatasetConfig": (
        "mixture_or_task_name task_feature_lengths split batch_size shuffle seed use_cached "
        "pack use_custom_packing_ops module use_memory_cache trim_output_features "
        "runtime_preprocessors num_prefetch_threads num_workers"
    ),
    "t5x.utils.SaveCheckpointConfig": (
        "dtype period checkpoint_steps keep keep_dataset_checkpoints save_dataset "
        "checkpointer_cls state_transformation_fns checkpoint_manager_cls"
    ),
    "t5x.utils.RestoreCheckpointConfig": (
        "path mode assignment_map strict fallback_to_scratch dtype restore_dataset "
        "checkpointer_cls state_transformation_fns checkpoint_manager_cls"
    ),
    "t5x.partitioning.PjitPartitioner": (
        "num_partitions model_parallel_submesh params_on_devices backend ici_mesh_shape "
        "dcn_mesh_shape logical_axis_rules"
    ),
    "t5x.partitioning.standard_logical_axis_rules": (
        "activation_partitioning_dims parameter_partitioning_dims additional_rules"
    ),
    # model, train_state, partitioner, eval_names, summary_dir, train_state_axes and rng
    # are passed by T5X's train().
    "t5x.trainer.Trainer": "learning_rate_fn num_microbatches weight_metrics_computer",
    "t5x.trainer.TerminateOnNanAction": "task metric",
    "t5x.models.EncoderDecoderModel": (
        "module input_vocabulary output_vocabulary optimizer_def decode_fn "
        "feature_converter_cls label_smoothing z_loss loss_normalizing_factor "
        "default_decoder_params"
    ),
    "t5x.models.DecoderOnlyModel": (
        "module vocabulary optimizer_def decode_fn inputs_bidirectional_attention "
        "feature_converter_cls label_smoothing z_loss loss_normalizing_factor"
    ),
    "t5x.examples.decoder_only.network.TransformerConfig": (
        "vocab_size dtype emb_dim num_heads num_layers head_dim mlp_dim mlp_activations "
        "dropout_rate logits_via_embedding"
    ),
    "t5x.examples.decoder_only.network.DecoderWrapper": "config",
    # params, batch and rng are passed by the code that decodes.
    "t5x.models.EncoderDecoderModel.predict_batch_with_aux": (
        "decoder_params return_all_decodes num_decodes prompt_with_targets"
    ),
    "t5x.adafactor.Adafactor": (
        "learning_rate factored multiply_by_parameter_scale beta1 decay_rate step_offset "
        "clipping_threshold weight_decay_rate min_dim_size_to_factor epsilon1 epsilon2 "
        "dtype_momentum factor_map logical_factor_rules weight_decay_rate_lr_exponent "
        "global_norm_clip_threshold max_parameter_scale skip_nan_updates"
    ),
    # examples/t5's fields, the GPU network's scale_attn_logits, scalable_t5's scan fields.
    "t5x.examples.t5.network.T5Config": (
        "vocab_size dtype emb_dim num_heads num_encoder_layers num_decoder_layers head_dim "
        "mlp_dim mlp_activations dropout_rate logits_via_embedding float32_attention_logits "
        "scale_attn_logits remat_policy scan_layers param_scan_axis"
    ),
    "t5x.optimizers.chain": "transformations",
    "t5x.utils.CheckpointConfig": "save restore",
    "t5x.utils.create_learning_rate_scheduler": (
        "factors base_learning_rate warmup_steps decay_factor steps_per_decay "
        "steps_per_cycle step_offset min_learning_rate"
    ),
}
ENTRIES = {entry.t5x_path: entry for entry in NAMES}


def _parameters(entry) -> set[str]:
    """What t5forge answers for each parameter: its rules, or for a name that is t5forge's
    own configurable (same_object), that configurable's signature."""
    if not entry.same_object:
        return set(entry.rules)
    from t5forge.gin_config import gin_internals

    return set(inspect.signature(gin_internals.registered_object(entry.twin)).parameters)


@pytest.mark.parametrize("t5x_path", T5X_SIGNATURES)
def test_every_t5x_parameter_has_a_rule(t5x_path):
    assert t5x_path in ENTRIES, f"{t5x_path}: no entry in t5x_compat/names.py"
    missing = set(T5X_SIGNATURES[t5x_path].split()) - _parameters(ENTRIES[t5x_path])
    assert not missing, f"{t5x_path}: no rule for {sorted(missing)}"
