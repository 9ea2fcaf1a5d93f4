"""`t5.data.mixtures`: T5's GLUE and SuperGLUE mixtures, each task weighted by its training
set size (T5's glue_utils tables). Importing this module registers T5's tasks too."""

from __future__ import annotations

from t5forge.data.providers.mixture import MixtureRegistry
from t5forge.t5.data import tasks  # noqa: F401  (registers the tasks mixed here)
from t5forge.t5.data.glue_utils import (
    GLUE_WEIGHT_MAPPING,
    SUPER_GLUE_WEIGHT_MAPPING,
    SUPER_GLUE_WEIGHT_MAPPING_SENTINEL,
)

_MIXTURES = {
    "glue_v002_proportional": list(GLUE_WEIGHT_MAPPING.items()),
    "super_glue_v102_proportional": list(SUPER_GLUE_WEIGHT_MAPPING.items()),
    "super_glue_v102_proportional_sentinel": list(SUPER_GLUE_WEIGHT_MAPPING_SENTINEL.items()),
    "glue_mnli_and_dev_v002": [(name, 1.0) for name in GLUE_WEIGHT_MAPPING if "mnli" in name],
}

for _name, _tasks_and_rates in _MIXTURES.items():
    MixtureRegistry.remove(_name)
    MixtureRegistry.add(_name, _tasks_and_rates)
