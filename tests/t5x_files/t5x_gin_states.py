"""What each of T5X's 149 gin files does under t5forge: it runs, or it is refused in one line
for a named reason. The walk test (test_t5x_gin_walk.py) checks every row; docs/t5x-gin-files.md
shows the table `python tests/t5x_files/t5x_gin_states.py` prints, and a test checks it does.
"""

from __future__ import annotations

import dataclasses
import sys

from t5forge.gin_config.t5x_compat.flaxformer_names import MOE as MOE_FEATURE
from t5forge.gin_config.t5x_compat.translate import missing_parameters


@dataclasses.dataclass(frozen=True)
class Refused:
    """Refused in one line: `reason` for docs/t5x-gin-files.md, `says` the words the line must
    hold."""

    reason: str
    says: str


RUNS = "runs"
EXPORT = Refused(
    "T5X's export writes a TensorFlow SavedModel; the line names `t5forge serve` and "
    "`t5forge convert --to hf`",
    "`t5forge serve`",
)
USER_TASK_MODULE = Refused(
    "imports dummy_wikipedia_seqio, a task module of T5X's GPU scripts folder, not a package; "
    "the line says to put its folder on PYTHONPATH",
    "imports dummy_wikipedia_seqio, which is not importable here",
)


def needs(feature: str):
    """RUNS where t5forge builds the model `feature`, else refused in one line naming it."""
    missing = missing_parameters(feature)
    if not missing:
        return RUNS
    return Refused(f"needs {feature}, which t5forge does not build yet", feature)


# contrib/moe's run files, with a Flaxformer MoE model file.
MOE = needs(MOE_FEATURE)
UMT5_INCLUDE = Refused(
    "T5X's own file includes t5x/configs/runs/pretrain_deterministic.gin, which T5X does "
    "not have (broken in T5X too)",
    "pretrain_deterministic.gin'`: file not found",
)
TYDIQA_IMPORT = Refused(
    "T5X's own file binds partitioning.PjitPartitioner without importing partitioning "
    "(gin refuses it in T5X too)",
    "'partitioning' was not provided by an import statement",
)
MOE_TFEXAMPLE_IMPORT = Refused(
    "T5X's own file binds train_script.precompile without importing train_script "
    "(gin refuses it in T5X too)",
    "'train_script' was not provided by an import statement",
)
MESH_TF = Refused(
    "a Mesh TensorFlow operative config, not a T5X file; the line names `t5forge convert "
    "--from mesh_tf`",
    "Mesh TensorFlow operative config",
)

STATES = {
    "t5x/configs/runs/eval.gin": RUNS,
    "t5x/configs/runs/export.gin": EXPORT,
    "t5x/configs/runs/export_seqio.gin": EXPORT,
    "t5x/configs/runs/finetune.gin": RUNS,
    "t5x/configs/runs/infer.gin": RUNS,
    "t5x/configs/runs/infer_from_tfexample_file.gin": RUNS,
    "t5x/configs/runs/precompile.gin": RUNS,
    "t5x/configs/runs/pretrain.gin": RUNS,
    "t5x/contrib/gpu/scripts_gpu/dummy_wikipedia_config/small_pretrain_dummy_wikipedia.gin": (
        USER_TASK_MODULE
    ),
    "t5x/contrib/gpu/t5/byt5/base.gin": RUNS,
    "t5x/contrib/gpu/t5/byt5/large.gin": RUNS,
    "t5x/contrib/gpu/t5/byt5/small.gin": RUNS,
    "t5x/contrib/gpu/t5/byt5/tiny.gin": RUNS,
    "t5x/contrib/gpu/t5/byt5/xl.gin": RUNS,
    "t5x/contrib/gpu/t5/byt5/xxl.gin": RUNS,
    "t5x/contrib/gpu/t5/configs/runs/eval.gin": RUNS,
    "t5x/contrib/gpu/t5/configs/runs/export.gin": EXPORT,
    "t5x/contrib/gpu/t5/configs/runs/export_seqio.gin": EXPORT,
    "t5x/contrib/gpu/t5/configs/runs/finetune.gin": RUNS,
    "t5x/contrib/gpu/t5/configs/runs/finetune_mnli.gin": RUNS,
    "t5x/contrib/gpu/t5/configs/runs/finetune_squad1.gin": RUNS,
    "t5x/contrib/gpu/t5/configs/runs/infer.gin": RUNS,
    "t5x/contrib/gpu/t5/configs/runs/infer_from_tfexample_file.gin": RUNS,
    "t5x/contrib/gpu/t5/configs/runs/precompile.gin": RUNS,
    "t5x/contrib/gpu/t5/configs/runs/pretrain.gin": RUNS,
    "t5x/contrib/gpu/t5/configs/runs/pretrain_pile.gin": RUNS,
    "t5x/contrib/gpu/t5/local_tiny.gin": RUNS,
    "t5x/contrib/gpu/t5/mt5/base.gin": RUNS,
    "t5x/contrib/gpu/t5/mt5/large.gin": RUNS,
    "t5x/contrib/gpu/t5/mt5/small.gin": RUNS,
    "t5x/contrib/gpu/t5/mt5/tiny.gin": RUNS,
    "t5x/contrib/gpu/t5/mt5/xl.gin": RUNS,
    "t5x/contrib/gpu/t5/mt5/xxl.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_0/11B.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_0/3B.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_0/base.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_0/large.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_0/small.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_0/tiny.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/adamw_opt.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/base.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/base_c4_pretrain.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/base_wmt14enfr_eval.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/base_wmt14enfr_finetune.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/base_wmt14enfr_train.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/base_wmt19_ende_train.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/base_wmt_eval.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/base_wmt_from_scratch.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/base_wmt_from_scratch_adamw.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/base_wmt_infer.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/large_mnli2_finetune_adam.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/large_pile_pretrain.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/large_squad1_finetune_adam.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/small_c4_pretrain.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/small_mnli2_finetune_adam.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/small_pile_pretrain.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/small_squad1_finetune_adam.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/small_wmt_finetune.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/test_train_eval_t5_tiny.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/test_train_t5_tiny.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/xl_mnli2_finetune_adam.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/xl_pile_pretrain.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/xl_squad1_finetune_adam.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/examples/xxl_pile_pretrain.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/large.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/small.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/tiny.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/xl.gin": RUNS,
    "t5x/contrib/gpu/t5/t5_1_1/xxl.gin": RUNS,
    "t5x/contrib/moe/configs/runs/continue_pretrain.gin": MOE,
    "t5x/contrib/moe/configs/runs/eval.gin": MOE,
    "t5x/contrib/moe/configs/runs/export.gin": EXPORT,
    "t5x/contrib/moe/configs/runs/export_seqio.gin": EXPORT,
    "t5x/contrib/moe/configs/runs/finetune.gin": MOE,
    "t5x/contrib/moe/configs/runs/infer.gin": MOE,
    "t5x/contrib/moe/configs/runs/infer_from_tfexample_file.gin": MOE_TFEXAMPLE_IMPORT,
    "t5x/contrib/moe/configs/runs/precompile.gin": MOE,
    "t5x/contrib/moe/configs/runs/pretrain.gin": MOE,
    "t5x/contrib/moe/configs/runs/sparse_upcycle.gin": MOE,
    "t5x/examples/decoder_only/examples/base_wmt_from_scratch.gin": RUNS,
    "t5x/examples/decoder_only/models/base.gin": RUNS,
    "t5x/examples/decoder_only/models/large.gin": RUNS,
    "t5x/examples/decoder_only/models/xl.gin": RUNS,
    "t5x/examples/decoder_only/models/xxl.gin": RUNS,
    "t5x/examples/scalable_t5/local_tiny.gin": RUNS,
    "t5x/examples/scalable_t5/mt5/base.gin": RUNS,
    "t5x/examples/scalable_t5/mt5/large.gin": RUNS,
    "t5x/examples/scalable_t5/mt5/small.gin": RUNS,
    "t5x/examples/scalable_t5/mt5/xl.gin": RUNS,
    "t5x/examples/scalable_t5/mt5/xxl.gin": RUNS,
    "t5x/examples/scalable_t5/t5_1_1/base.gin": RUNS,
    "t5x/examples/scalable_t5/t5_1_1/examples/wmt19_ende_from_scratch.gin": RUNS,
    "t5x/examples/scalable_t5/t5_1_1/large.gin": RUNS,
    "t5x/examples/scalable_t5/t5_1_1/small.gin": RUNS,
    "t5x/examples/scalable_t5/t5_1_1/xl.gin": RUNS,
    "t5x/examples/scalable_t5/t5_1_1/xxl.gin": RUNS,
    "t5x/examples/scalable_t5/umt5/architectures/encoder_decoder.gin": RUNS,
    "t5x/examples/scalable_t5/umt5/optimizer/adafactor.gin": RUNS,
    "t5x/examples/scalable_t5/umt5/optimizer/adafactor_momentum_nofactor.gin": RUNS,
    "t5x/examples/scalable_t5/umt5/pretrain_base.gin": UMT5_INCLUDE,
    "t5x/examples/scalable_t5/umt5/pretrain_large.gin": UMT5_INCLUDE,
    "t5x/examples/scalable_t5/umt5/pretrain_small.gin": UMT5_INCLUDE,
    "t5x/examples/scalable_t5/umt5/pretrain_xl.gin": UMT5_INCLUDE,
    "t5x/examples/scalable_t5/umt5/pretrain_xxl.gin": UMT5_INCLUDE,
    "t5x/examples/scalable_t5/umt5/runs/finetuning_common.gin": RUNS,
    "t5x/examples/scalable_t5/umt5/runs/pretraining_common.gin": UMT5_INCLUDE,
    "t5x/examples/scalable_t5/umt5/tydiqa_base.gin": TYDIQA_IMPORT,
    "t5x/examples/scalable_t5/umt5/vocab.gin": RUNS,
    "t5x/examples/t5/byt5/base.gin": RUNS,
    "t5x/examples/t5/byt5/large.gin": RUNS,
    "t5x/examples/t5/byt5/small.gin": RUNS,
    "t5x/examples/t5/byt5/tiny.gin": RUNS,
    "t5x/examples/t5/byt5/xl.gin": RUNS,
    "t5x/examples/t5/byt5/xxl.gin": RUNS,
    "t5x/examples/t5/local_tiny.gin": RUNS,
    "t5x/examples/t5/mt5/base.gin": RUNS,
    "t5x/examples/t5/mt5/large.gin": RUNS,
    "t5x/examples/t5/mt5/small.gin": RUNS,
    "t5x/examples/t5/mt5/tiny.gin": RUNS,
    "t5x/examples/t5/mt5/xl.gin": RUNS,
    "t5x/examples/t5/mt5/xxl.gin": RUNS,
    "t5x/examples/t5/t5_1_0/11B.gin": RUNS,
    "t5x/examples/t5/t5_1_0/3B.gin": RUNS,
    "t5x/examples/t5/t5_1_0/base.gin": RUNS,
    "t5x/examples/t5/t5_1_0/large.gin": RUNS,
    "t5x/examples/t5/t5_1_0/small.gin": RUNS,
    "t5x/examples/t5/t5_1_0/tiny.gin": RUNS,
    "t5x/examples/t5/t5_1_1/base.gin": RUNS,
    "t5x/examples/t5/t5_1_1/examples/base_c4_pretrain.gin": RUNS,
    "t5x/examples/t5/t5_1_1/examples/base_wmt14enfr_eval.gin": RUNS,
    "t5x/examples/t5/t5_1_1/examples/base_wmt14enfr_finetune.gin": RUNS,
    "t5x/examples/t5/t5_1_1/examples/base_wmt14enfr_train.gin": RUNS,
    "t5x/examples/t5/t5_1_1/examples/base_wmt19_ende_train.gin": RUNS,
    "t5x/examples/t5/t5_1_1/examples/base_wmt_eval.gin": RUNS,
    "t5x/examples/t5/t5_1_1/examples/base_wmt_finetune.gin": RUNS,
    "t5x/examples/t5/t5_1_1/examples/base_wmt_from_scratch.gin": RUNS,
    "t5x/examples/t5/t5_1_1/examples/base_wmt_from_scratch_adamw.gin": RUNS,
    "t5x/examples/t5/t5_1_1/examples/base_wmt_from_scratch_lion.gin": RUNS,
    "t5x/examples/t5/t5_1_1/examples/base_wmt_infer.gin": RUNS,
    "t5x/examples/t5/t5_1_1/examples/small_c4_pretrain.gin": RUNS,
    "t5x/examples/t5/t5_1_1/examples/small_wmt_finetune.gin": RUNS,
    "t5x/examples/t5/t5_1_1/examples/test_train_eval_t5_tiny.gin": RUNS,
    "t5x/examples/t5/t5_1_1/examples/test_train_t5_tiny.gin": RUNS,
    "t5x/examples/t5/t5_1_1/large.gin": RUNS,
    "t5x/examples/t5/t5_1_1/small.gin": RUNS,
    "t5x/examples/t5/t5_1_1/tiny.gin": RUNS,
    "t5x/examples/t5/t5_1_1/xl.gin": RUNS,
    "t5x/examples/t5/t5_1_1/xxl.gin": RUNS,
    "t5x/testdata/mtf_tiny_t5/operative_config.gin": MESH_TF,
}


def state_text(state) -> str:
    return "runs" if state == RUNS else f"refused in one line: {state.reason}"


def table(states: dict, heading: str) -> str:
    """One file per row (runs, or the refusal's reason), then the counts."""
    lines = [f"| {heading} | under t5forge |", "|---|---|"]
    lines += [f"| `{path}` | {state_text(state)} |" for path, state in states.items()]
    runs = sum(state == RUNS for state in states.values())
    lines.append(f"| **{len(states)} files** | **{runs} run, {len(states) - runs} refused** |")
    return "\n".join(lines) + "\n"


def readme_table() -> str:
    """T5X's table: each file's state (runs, or the refusal's reason)."""
    return table(STATES, "T5X gin file")


if __name__ == "__main__":
    sys.stdout.write(readme_table())
