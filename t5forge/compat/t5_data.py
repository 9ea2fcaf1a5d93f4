"""`import t5.data` / `t5.data.<name>`: T5's data namespace (its SeqIO re-exports, the
default vocabulary and output features, the rate functions); `t5.data.preprocessors`,
`postprocessors`, `glue_utils`, `tasks` and `mixtures` are t5forge modules of those names
(see t5forge.compat.STAND_INS)."""

from __future__ import annotations

import importlib

from t5forge.seqio import (  # noqa: F401  (T5 re-exports SeqIO's dataset providers)
    Feature,
    Mixture,
    MixtureRegistry,
    Task,
    TaskRegistry,
    TextLineDataSource,
    get_mixture_or_task,
    mixing_rate_num_examples,
)
from t5forge.tasks.t5_registry.vocabulary import (  # noqa: F401
    DEFAULT_EXTRA_IDS,
    DEFAULT_SPM_PATH,
    get_default_vocabulary,
)

__path__: list[str] = []  # a package to the import system: its submodules are stand-ins too


def rate_num_examples(
    task, maximum=None, temperature=1.0, scale=1.0, fallback_to_num_input_examples=True
) -> float:
    """T5's rate proportional to a task's size (its argument order differs from SeqIO's)."""
    return mixing_rate_num_examples(task, maximum=maximum, scale=scale, temperature=temperature)


def rate_unsupervised(task, value: float = 1e6) -> float:
    """T5's fixed rate for an unsupervised task in a mixture."""
    return value


_SUBMODULES = ("glue_utils", "mixtures", "postprocessors", "preprocessors", "tasks")


def __getattr__(name: str):
    """`t5.data.preprocessors` etc. without importing them first, as T5's package does."""
    if name in _SUBMODULES:
        return importlib.import_module(f"t5.data.{name}")
    raise AttributeError(f"module 't5.data' (t5forge.compat) has no attribute {name!r}")
