"""Every T5X gin name t5forge understands, and what happens to each of its parameters.

One entry per name T5X's gin files import and bind (`from t5x import utils` ...
`utils.SaveCheckpointConfig.period = 1000`). An entry either forwards to t5forge's configurable
of the same job (its `twin`: bindings move there after parsing, so a command-line override such as
`--gin.utils.DatasetConfig.batch_size=8`, which names the twin, wins; calling the T5X name
calls the twin), or has Python of its own
(`build`, with T5X's signature). The rules (t5forge.gin_config.t5x_compat.rules) say, per parameter,
whether t5forge honours it, moves it, or reports it; docs/t5x-migration.md lists the same.
The entries live by T5X library: run_names.py (the scripts, t5x.utils, seqio's evaluation),
training_names.py (partitioning, trainer, optimizers), model_names.py (models, networks,
decoding, vocabularies), moe_names.py (contrib/moe), flaxformer_names.py (Flaxformer); this
module joins them and says which T5X modules t5forge stands in for.
"""

from __future__ import annotations

from t5forge.gin_config.t5x_compat import (
    flaxformer_objects,
    model_names,
    run_names,
    training_names,
)
from t5forge.gin_config.t5x_compat.flaxformer_names import flaxformer_names
from t5forge.gin_config.t5x_compat.moe_names import MOE_NAMES
from t5forge.gin_config.t5x_compat.name_entry import T5XName

# In this order: translate.py reports a parse's refusals name by name, the first one raised.
NAMES: tuple[T5XName, ...] = (
    *run_names.SCRIPTS,
    *run_names.UTILS,
    *training_names.PARTITIONING,
    *training_names.TRAINER,
    *model_names.MODELS,
    *training_names.ADAFACTOR,
    *model_names.DECODER_ONLY_NETWORK,
    *model_names.DECODING,
    *training_names.OPTIMIZERS,
    *run_names.GIN_UTILS,
    *model_names.T5_NETWORK,
    *model_names.VOCABULARIES,
    *run_names.EVALUATION,
    *MOE_NAMES,
    *flaxformer_names(),
)

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
