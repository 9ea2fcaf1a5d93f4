"""The command a Flaxformer user runs for each of Flaxformer's 80 gin files, with tiny overrides.

Flaxformer's model files (`configs/{t5,longt5,moe}/models/*.gin`) go with T5X's run files, as
T5X's README runs them (`--gin_search_paths` holding both checkouts): T5X's
`runs/pretrain.gin`, and for MoE models contrib/moe's `runs/pretrain.gin`. Architecture files
and overlays (`flash_attention.gin`, moe's `runs/scan.gin`, `checkpointing.gin`) go after a
model file that includes that family. The overrides are the model files' own macros at tiny
sizes (`--gin.EMBED_DIM=32`, ...), the task and lengths of the T5X walk.
"""

from __future__ import annotations

from pathlib import Path

from t5x_gin_commands import FLAXFORMER_GIN, MOE_MODEL, T5X_GIN, command_of, overrides

CONFIGS = "flaxformer/t5x/configs"

TINY_MACROS = {
    "NUM_ENCODER_LAYERS": 2,
    "NUM_DECODER_LAYERS": 2,
    "NUM_HEADS": 4,
    "HEAD_DIM": 8,
    "EMBED_DIM": 32,
    "MLP_DIM": 64,
    "NUM_EMBEDDINGS": 1152,
    "ACTIVATION_DTYPE": "'float32'",
}
LONGT5_MACROS = {"LOCAL_RADIUS": 3, "TOKENS_PER_BLOCK": 2}
# What moe.gin requires a user to set ("NUM_MODEL_PARTITIONS or MODEL_PARALLEL_SUBMESH").
MOE_REQUIRED = {"NUM_MODEL_PARTITIONS": 1}
MOE_MACROS = {
    **MOE_REQUIRED,
    "NUM_EXPERTS": 4,
    "NUM_ENCODER_SPARSE_LAYERS": 1,
    "NUM_DECODER_SPARSE_LAYERS": 1,
    "GROUP_SIZE": 32,
    "MOE_TRUNCATED_DTYPE": "'float32'",
}

PRETRAIN = "t5x/configs/runs/pretrain.gin"
MOE_PRETRAIN = "t5x/contrib/moe/configs/runs/pretrain.gin"
T5_MODEL = f"{CONFIGS}/t5/models/t5_1_1_base.gin"

ARCHITECTURE_MODELS = {  # architecture file or overlay -> the model file it goes after
    f"{CONFIGS}/t5/architectures/t5_1_1_flaxformer.gin": T5_MODEL,
    f"{CONFIGS}/t5/architectures/t5_flaxformer.gin": f"{CONFIGS}/t5/models/t5_base.gin",
    f"{CONFIGS}/t5/architectures/flash_attention.gin": T5_MODEL,
    "flaxformer/t5x/checkpointing.gin": T5_MODEL,
    f"{CONFIGS}/longt5/architectures/longt5_1_1_flaxformer.gin": (
        f"{CONFIGS}/longt5/models/longt5_1_1_base.gin"
    ),
    f"{CONFIGS}/longt5/architectures/longt5_1_1_transient_global_flaxformer.gin": (
        f"{CONFIGS}/longt5/models/longt5_1_1_transient_global_base.gin"
    ),
    f"{CONFIGS}/moe/architectures/moe.gin": MOE_MODEL,
    f"{CONFIGS}/moe/runs/scan.gin": MOE_MODEL,
}


def all_files() -> list[str]:
    """Every .gin file of Flaxformer, relative to the checkout root."""
    return sorted(str(p.relative_to(FLAXFORMER_GIN)) for p in FLAXFORMER_GIN.rglob("*.gin"))


def _run_file(model: str) -> str:
    return MOE_PRETRAIN if "/moe/" in model else PRETRAIN


def gin_files(path: str) -> tuple[str, list[str]]:
    """(command, --gin_file values in order) for one Flaxformer file."""
    if path in ARCHITECTURE_MODELS:
        model = ARCHITECTURE_MODELS[path]
        return "train", [model, _run_file(model), path]
    if "/examples/" in path or "/example_configs/" in path:
        return "train", [path] if path.endswith("c4_lm.gin") else [path, PRETRAIN]
    return "train", [path, _run_file(path)]


def required(path: str) -> list[str]:
    """The flags a model file leaves to its user whatever the size."""
    return [f"--gin.{k}={v}" for k, v in MOE_REQUIRED.items()] if "/moe/" in path else []


def macros(path: str) -> dict:
    """The model macros a user shrinks for this file's family."""
    values = dict(TINY_MACROS)
    if "/longt5/" in path:
        values |= LONGT5_MACROS
    if "/moe/" in path:
        values |= MOE_MACROS
    return values


def argv(path: str, out: Path, run_file: str | None = None) -> tuple[str, list[str]]:
    """(command, its arguments) as a user would type them, from --gin_search_paths; a model
    file goes with `run_file` (T5X's `runs/eval.gin`, ...) in place of pretraining."""
    command, files = gin_files(path)
    if run_file is not None:
        command, files = command_of(Path(run_file).stem), [path, run_file]
    return command, [
        f"--gin_search_paths={FLAXFORMER_GIN},{T5X_GIN}",
        *(f"--gin_file={f}" for f in files),
        *overrides(out),
        *(f"--gin.{name}={value}" for name, value in macros(path).items()),
    ]
