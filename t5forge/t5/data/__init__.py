"""`t5.data`: T5's data namespace (its SeqIO re-exports, the default vocabulary and the rate
functions of t5.data.utils); `preprocessors`, `postprocessors`, `glue_utils`, `tasks` and
`mixtures` are the modules of those names beside this one."""

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
from t5forge.t5.data.utils import (  # noqa: F401  (T5 re-exports its data utils)
    DEFAULT_EXTRA_IDS,
    DEFAULT_SPM_PATH,
    get_default_vocabulary,
    rate_num_examples,
    rate_unsupervised,
)

_SUBMODULES = ("glue_utils", "mixtures", "postprocessors", "preprocessors", "tasks")


def __getattr__(name: str):
    """`t5.data.preprocessors` etc. without importing them first, as T5's package does."""
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 't5.data' (t5forge.t5) has no attribute {name!r}")
