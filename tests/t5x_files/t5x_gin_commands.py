"""The command a T5X user runs for each of T5X's own gin files, with tiny overrides only.

Model files go with a run file (`runs/pretrain.gin`), run files with a model file, overlays
(`local_tiny.gin`, umT5's architecture, optimizer and vocabulary pieces, the GPU AdamW file)
after both, and example files alone, as T5X's README runs them. The overrides are what a
user passes on the command line: a t5forge built-in task in place of T5's TensorFlow ones (the
task of each example comes from issue 25's task catalogue), tiny sizes, 2 steps.
"""

from __future__ import annotations

import os
from pathlib import Path

from tiny_model import TINY_GIN_VALUES

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("T5FORGE_SHARED_DATA", REPO.parent / "shared" / "data"))
T5X_GIN = SHARED_DATA.parent / "t5x_gin"  # T5X's 149 files, never edited (its README)
FLAXFORMER_GIN = SHARED_DATA.parent / "flaxformer_gin"  # Flaxformer's 80, at 399ea3a
TFEXAMPLE_DIR = REPO / "tests" / "data" / "tfds_fixtures" / "tfexample"

TASK = "en_de_lohelp_translate"
TINY_NETWORK = TINY_GIN_VALUES
DECODER_ONLY_TINY = {
    **{k: v for k, v in TINY_NETWORK.items() if "layers" not in k},
    "num_layers": 2,
}

T5_MODEL = "t5x/examples/t5/t5_1_1/tiny.gin"
GPU_MODEL = "t5x/contrib/gpu/t5/t5_1_1/tiny.gin"
SCALABLE_MODEL = "t5x/examples/scalable_t5/t5_1_1/small.gin"
UMT5_MODEL = "t5x/examples/scalable_t5/mt5/small.gin"
# contrib/moe's run files need a MoE model: Flaxformer's (T5X has none of its own).
MOE_MODEL = "flaxformer/t5x/configs/moe/models/tokens_choose_tiny.gin"
PRETRAIN = "t5x/configs/runs/pretrain.gin"
GPU_PRETRAIN = "t5x/contrib/gpu/t5/configs/runs/pretrain.gin"

OVERLAYS = {  # overlay -> the model file it goes after (with runs/pretrain.gin)
    "t5x/examples/t5/local_tiny.gin": T5_MODEL,
    "t5x/contrib/gpu/t5/local_tiny.gin": GPU_MODEL,
    "t5x/examples/scalable_t5/local_tiny.gin": SCALABLE_MODEL,
    "t5x/contrib/gpu/t5/t5_1_1/adamw_opt.gin": GPU_MODEL,
    "t5x/examples/scalable_t5/umt5/architectures/encoder_decoder.gin": UMT5_MODEL,
    "t5x/examples/scalable_t5/umt5/optimizer/adafactor.gin": UMT5_MODEL,
    "t5x/examples/scalable_t5/umt5/optimizer/adafactor_momentum_nofactor.gin": UMT5_MODEL,
    "t5x/examples/scalable_t5/umt5/vocab.gin": UMT5_MODEL,
}


def all_files() -> list[str]:
    """Every .gin file of T5X, relative to the checkout root."""
    return sorted(str(p.relative_to(T5X_GIN)) for p in T5X_GIN.rglob("*.gin"))


def command_of(stem: str) -> str:
    if stem == "eval" or stem.endswith("_eval"):
        return "eval"
    if "infer" in stem or "export" in stem:  # T5X's export saves an inference function
        return "infer"
    return "train"


def _is_example(path: str) -> bool:
    return (
        "/examples/" in path.removeprefix("t5x/examples/")
        or "/scripts_gpu/" in path
        or path.startswith("t5x/testdata/")
        or path.endswith(("umt5/tydiqa_base.gin",))
        or "/umt5/pretrain_" in path
    )


def gin_files(path: str) -> tuple[str, list[str]]:
    """(command, --gin_file values in order) for one T5X file."""
    stem = Path(path).stem
    if path in OVERLAYS:
        model = OVERLAYS[path]
        return "train", [model, GPU_PRETRAIN if model == GPU_MODEL else PRETRAIN, path]
    if "/runs/" in path:
        if "/contrib/gpu/" in path:
            model = GPU_MODEL
        elif "/umt5/" in path:
            model = UMT5_MODEL
        elif "/contrib/moe/" in path:
            model = MOE_MODEL
        else:
            model = T5_MODEL
        return command_of(stem), [model, path]
    if _is_example(path):
        return command_of(stem), [path]
    return "train", [path, GPU_PRETRAIN if "/contrib/gpu/" in path else PRETRAIN]


def network_overrides(path: str) -> list[str]:
    """Tiny sizes: T5X's network fields, or a Flaxformer model's macros."""
    if "/contrib/moe/" in path:
        from flaxformer_gin_commands import macros

        return [f"--gin.{name}={value}" for name, value in macros(MOE_MODEL).items()]
    decoder_only = "decoder_only" in path
    fields = DECODER_ONLY_TINY if decoder_only else TINY_NETWORK
    return [
        f"--gin.network.{'TransformerConfig' if decoder_only else 'T5Config'}.{k}={v}"
        for k, v in fields.items()
    ]


def overrides(out: Path) -> list[str]:
    """A T5X user's command-line values: task, lengths, steps, directories."""
    return [
        f"--gin.MIXTURE_OR_TASK_NAME={TASK}",
        f"--gin.TRAIN_EVAL_MIXTURE_OR_TASK_NAME={TASK}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 16, 'targets': 16}",
        "--gin.TRAIN_STEPS=2",
        "--gin.BATCH_SIZE=4",
        "--gin.DROPOUT_RATE=0.0",
        "--gin.USE_CACHED_TASKS=False",
        f"--gin.MODEL_DIR={out / 'model'}",
        f"--gin.INITIAL_CHECKPOINT_PATH={out / 'initial' / 'checkpoint_2'}",
        f"--gin.CHECKPOINT_PATH={out / 'initial' / 'checkpoint_2'}",
        f"--gin.EVAL_OUTPUT_DIR={out / 'eval'}",
        f"--gin.INFER_OUTPUT_DIR={out / 'infer'}",
    ]


def tfexample_overrides() -> list[str]:
    """What infer_from_tfexample_file.gin leaves to the user: the files (tf.Examples written
    by TensorFlow, with the `inputs` text feature the file's task reads), their type, lengths."""
    files = sorted(str(p) for p in TFEXAMPLE_DIR.glob("*.tfrecord"))
    return [
        f"--gin.TF_EXAMPLE_FILE_PATHS={files}",
        "--gin.TF_EXAMPLE_FILE_TYPE='tfrecord'",
        "--gin.FEATURE_LENGTHS={'inputs': 16, 'targets': 16}",
    ]


def argv(path: str, out: Path) -> tuple[str, list[str]]:
    """(command, its arguments) as a T5X user would type them, from --gin_search_paths."""
    command, files = gin_files(path)
    return command, [
        f"--gin_search_paths={T5X_GIN},{FLAXFORMER_GIN}",
        *(f"--gin_file={f}" for f in files),
        *overrides(out),
        *network_overrides(path),
        *(tfexample_overrides() if "infer_from_tfexample_file" in path else []),
    ]
