"""What each of Flaxformer's 80 gin files does under t5forge: it runs, or it is refused in one
line for a named reason. The walk test (test_flaxformer_gin_walk.py) checks every row; the
docs page docs/flaxformer-gin.md shows this table (T5X's is docs/t5x-gin-files.md), written by
`python tests/t5x_files/flaxformer_gin_states.py > docs/flaxformer-gin.md`
(test_the_docs_page_is_the_generated_one checks that they match).

LongT5's and the MoE models' rows depend on the model features: while T5Config lacks their
fields, each file is refused in one line naming the feature; once they exist, it runs.
"""

from __future__ import annotations

import sys

from t5x_gin_states import RUNS, Refused, needs, table

from t5forge.gin_config.t5x_compat.flaxformer_names import LONGT5 as LONGT5_FEATURE
from t5forge.gin_config.t5x_compat.flaxformer_names import MOE as MOE_FEATURE
from t5forge.gin_config.t5x_compat.names import NAMES

LONGT5 = needs(LONGT5_FEATURE)
MOE = needs(MOE_FEATURE)
RESEARCH = "a research architecture t5forge does not build"
CALM = Refused(f"CALM (early-exit decoding): {RESEARCH}", "CALM")
FLAX_OPTIM = Refused(
    "imports flax.optim, which Flax removed in 0.6 (T5X cannot import it either)",
    "flax.optim was removed from Flax",
)
H_TRANSFORMER = Refused(f"H-Transformer-1D: {RESEARCH}", "H-Transformer-1D")
PERCEIVER_AR = Refused(f"Perceiver AR: {RESEARCH}", "Perceiver AR")
FIDO = Refused(f"FiDO: {RESEARCH}", "FiDO")
CHECKPOINTING = Refused(
    "renames Flaxformer's parameters inside T5X's checkpointer; t5forge reads T5X and "
    "Flaxformer checkpoints by their names",
    "flaxformer.t5x is not available",
)

STATES = {
    "flaxformer/architectures/fido/example_configs/t5_lsa_base.gin": FIDO,
    "flaxformer/architectures/fido/example_configs/t5_lsa_scan_base.gin": FIDO,
    "flaxformer/t5x/checkpointing.gin": CHECKPOINTING,
    "flaxformer/t5x/configs/calm/architectures/calm_metacls_t5_1_1_flaxformer.gin": CALM,
    "flaxformer/t5x/configs/calm/architectures/calm_t5_1_1_flaxformer.gin": CALM,
    "flaxformer/t5x/configs/calm/models/calm_metacls_t5_1_1_base.gin": FLAX_OPTIM,
    "flaxformer/t5x/configs/calm/models/calm_metacls_t5_1_1_small.gin": FLAX_OPTIM,
    "flaxformer/t5x/configs/calm/models/calm_t5_1_1_base.gin": CALM,
    "flaxformer/t5x/configs/calm/models/calm_t5_1_1_small.gin": CALM,
    "flaxformer/t5x/configs/h_transformer/architectures/h_transformer_1d_decoder_only.gin": H_TRANSFORMER,
    "flaxformer/t5x/configs/h_transformer/architectures/h_transformer_1d_encoder_decoder.gin": H_TRANSFORMER,
    "flaxformer/t5x/configs/h_transformer/models/h_transformer_1d_decoder_only_base.gin": H_TRANSFORMER,
    "flaxformer/t5x/configs/h_transformer/models/h_transformer_1d_decoder_only_large.gin": H_TRANSFORMER,
    "flaxformer/t5x/configs/h_transformer/models/h_transformer_1d_decoder_only_small.gin": H_TRANSFORMER,
    "flaxformer/t5x/configs/h_transformer/models/h_transformer_1d_encoder_decoder_base.gin": H_TRANSFORMER,
    "flaxformer/t5x/configs/h_transformer/models/h_transformer_1d_encoder_decoder_large.gin": H_TRANSFORMER,
    "flaxformer/t5x/configs/h_transformer/models/h_transformer_1d_encoder_decoder_small.gin": H_TRANSFORMER,
    "flaxformer/t5x/configs/longt5/architectures/longt5_1_1_flaxformer.gin": LONGT5,
    "flaxformer/t5x/configs/longt5/architectures/longt5_1_1_transient_global_flaxformer.gin": LONGT5,
    "flaxformer/t5x/configs/longt5/models/longt5_1_1_base.gin": LONGT5,
    "flaxformer/t5x/configs/longt5/models/longt5_1_1_large.gin": LONGT5,
    "flaxformer/t5x/configs/longt5/models/longt5_1_1_small.gin": LONGT5,
    "flaxformer/t5x/configs/longt5/models/longt5_1_1_transient_global_base.gin": LONGT5,
    "flaxformer/t5x/configs/longt5/models/longt5_1_1_transient_global_large.gin": LONGT5,
    "flaxformer/t5x/configs/longt5/models/longt5_1_1_transient_global_small.gin": LONGT5,
    "flaxformer/t5x/configs/longt5/models/longt5_1_1_transient_global_xl.gin": LONGT5,
    "flaxformer/t5x/configs/longt5/models/longt5_1_1_transient_global_xxl.gin": LONGT5,
    "flaxformer/t5x/configs/longt5/models/longt5_1_1_xl.gin": LONGT5,
    "flaxformer/t5x/configs/longt5/models/longt5_1_1_xxl.gin": LONGT5,
    "flaxformer/t5x/configs/longt5/models/mlongt5_transient_global_base.gin": LONGT5,
    "flaxformer/t5x/configs/longt5/models/mlongt5_transient_global_large.gin": LONGT5,
    "flaxformer/t5x/configs/longt5/models/mlongt5_transient_global_xl.gin": LONGT5,
    "flaxformer/t5x/configs/moe/architectures/moe.gin": MOE,
    "flaxformer/t5x/configs/moe/models/experts_choose_base.gin": MOE,
    "flaxformer/t5x/configs/moe/models/experts_choose_large.gin": MOE,
    "flaxformer/t5x/configs/moe/models/experts_choose_small.gin": MOE,
    "flaxformer/t5x/configs/moe/models/experts_choose_tiny.gin": MOE,
    "flaxformer/t5x/configs/moe/models/experts_choose_xl.gin": MOE,
    "flaxformer/t5x/configs/moe/models/experts_choose_xxl.gin": MOE,
    "flaxformer/t5x/configs/moe/models/st_moe_32b.gin": MOE,
    "flaxformer/t5x/configs/moe/models/st_moe_base.gin": MOE,
    "flaxformer/t5x/configs/moe/models/st_moe_xl.gin": MOE,
    "flaxformer/t5x/configs/moe/models/switch_base.gin": MOE,
    "flaxformer/t5x/configs/moe/models/switch_c.gin": MOE,
    "flaxformer/t5x/configs/moe/models/switch_large.gin": MOE,
    "flaxformer/t5x/configs/moe/models/switch_xxl.gin": MOE,
    "flaxformer/t5x/configs/moe/models/tokens_choose_base.gin": MOE,
    "flaxformer/t5x/configs/moe/models/tokens_choose_large.gin": MOE,
    "flaxformer/t5x/configs/moe/models/tokens_choose_small.gin": MOE,
    "flaxformer/t5x/configs/moe/models/tokens_choose_tiny.gin": MOE,
    "flaxformer/t5x/configs/moe/models/tokens_choose_xl.gin": MOE,
    "flaxformer/t5x/configs/moe/models/tokens_choose_xxl.gin": MOE,
    "flaxformer/t5x/configs/moe/runs/scan.gin": MOE,
    "flaxformer/t5x/configs/perceiver_ar/architectures/perceiver_ar.gin": PERCEIVER_AR,
    "flaxformer/t5x/configs/perceiver_ar/examples/c4_lm.gin": PERCEIVER_AR,
    "flaxformer/t5x/configs/perceiver_ar/models/perceiver_ar_base.gin": PERCEIVER_AR,
    "flaxformer/t5x/configs/perceiver_ar/models/perceiver_ar_small.gin": PERCEIVER_AR,
    "flaxformer/t5x/configs/t5/architectures/flash_attention.gin": RUNS,
    "flaxformer/t5x/configs/t5/architectures/t5_1_1_flaxformer.gin": RUNS,
    "flaxformer/t5x/configs/t5/architectures/t5_flaxformer.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/byt5_base.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/byt5_large.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/byt5_small.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/byt5_xl.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/byt5_xxl.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/mt5_base.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/mt5_large.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/mt5_small.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/mt5_xl.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/mt5_xxl.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/t5_11B.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/t5_1_1_base.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/t5_1_1_large.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/t5_1_1_small.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/t5_1_1_xl.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/t5_1_1_xxl.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/t5_3B.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/t5_base.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/t5_large.gin": RUNS,
    "flaxformer/t5x/configs/t5/models/t5_small.gin": RUNS,
}


USAGE = """## Running a Flaxformer model file

```
t5forge train --gin_search_paths=/path/to/flaxformer,/path/to/t5x \\
  --gin_file=flaxformer/t5x/configs/t5/models/t5_1_1_base.gin \\
  --gin_file=t5x/configs/runs/pretrain.gin \\
  --gin.MODEL_DIR=/tmp/model --gin.MIXTURE_OR_TASK_NAME=my_task \\
  "--gin.TASK_FEATURE_LENGTHS={'inputs': 512, 'targets': 114}" --gin.TRAIN_STEPS=1000
```

- Sizes are the model file's own macros: `--gin.EMBED_DIM=32 --gin.NUM_HEADS=4
  --gin.HEAD_DIM=8 --gin.MLP_DIM=64 --gin.NUM_ENCODER_LAYERS=2 --gin.NUM_DECODER_LAYERS=2`
  (or t5forge's fields directly: `--gin.T5Config.emb_dim=32`, which win over the files).
- `runs/eval.gin` and `runs/infer.gin` (with `--gin.CHECKPOINT_PATH`) evaluate and infer, as
  for T5X's own model files. MoE model files go with T5X's `contrib/moe/configs/runs/*.gin` and,
  as `moe.gin` asks, `--gin.NUM_MODEL_PARTITIONS=1` (or `MODEL_PARALLEL_SUBMESH`).
- Transient-global LongT5 refuses packed inputs: add
  `--gin.train/utils.DatasetConfig.pack=False --gin.train_eval/utils.DatasetConfig.pack=False`
  to `runs/pretrain.gin`.
- Flaxformer draws attention kernels from a normal distribution and MoE files scale every
  initializer by `SCALE = 0.1`; t5forge initialises as T5X's T5 network does and says so in a
  warning naming the file and line. A checkpoint restores the same either way.

"""


def parameter_table() -> str:
    """One row per parameter of each Flaxformer (and T5X contrib/moe) name: what t5forge
    does with a binding of it, from the rules themselves."""
    lines = ["| binding | under t5forge |", "|---|---|"]
    for entry in NAMES:
        if not entry.module.startswith(("flaxformer.", "flax.", "t5x.contrib.moe")):
            continue
        name = f"{entry.module.rsplit('.', 1)[-1]}.{entry.name}"
        scoped = [("", entry.rules), *entry.scoped_rules.items()]
        for scope, rules in scoped:
            for param, rule in rules.items():
                prefix = f"{scope}/" if scope else ""
                lines.append(f"| `{prefix}{name}.{param}` | {rule.describe()} |")
    return "\n".join(lines) + "\n"


def docs_page() -> str:
    """docs/flaxformer-gin.md: Flaxformer's files (T5X's are docs/t5x-gin-files.md)."""
    return (
        "# Flaxformer's gin files under t5forge\n\n"
        "Every gin file of Flaxformer (google/flaxformer at 399ea3a), unchanged, as "
        "`t5forge train|eval|infer` reads it with T5X's run files "
        "(`--gin_search_paths` holding both checkouts). A file runs, or it is refused in one "
        "line that names the file and line of the binding and says why. Flaxformer's layers "
        "(`t5_architecture.*`, `dense_attention.*`, `dense.*`, `embedding.*`, "
        "`relative_position_biases.*`, `layer_norm.*`, `long_attention.*`, "
        "`moe_architecture.*`, `moe_layers.*`, `routing.*`) move their hyperparameters onto "
        "one T5Config; the last section says what happens to each parameter (the rules of "
        "`t5forge/gin_config/t5x_compat/flaxformer_names.py`). Written by "
        "`python tests/t5x_files/flaxformer_gin_states.py > docs/flaxformer-gin.md`.\n\n"
        + USAGE
        + "## Flaxformer\n\n"
        + table(STATES, "Flaxformer gin file")
        + "\nT5X's own files are in [their table](t5x-gin-files.md).\n"
        + "\n## What each Flaxformer parameter becomes\n\n"
        "A `T5Config.<field>` row moves the value onto that field whatever layer or scope bound "
        "it; two bindings of one field that disagree are refused in one line. A field of a "
        "model feature t5forge does not build yet refuses the file in one line naming the "
        "feature.\n\n" + parameter_table()
    )


if __name__ == "__main__":
    sys.stdout.write(docs_page())
