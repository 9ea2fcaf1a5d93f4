"""`t5.evaluation`: T5's metric functions are its `metrics` module."""

from __future__ import annotations

import importlib


def __getattr__(name: str):
    """`t5.evaluation.metrics` without importing it first, as T5's package allows."""
    if name == "metrics":
        return importlib.import_module(f"{__name__}.metrics")
    raise AttributeError(f"module 't5.evaluation' (t5forge.t5) has no attribute {name!r}")
