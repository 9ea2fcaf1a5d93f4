"""`import t5.evaluation`: its `metrics` is t5forge.data.t5_metrics."""

from __future__ import annotations

import importlib

__path__: list[str] = []  # a package to the import system: its submodules are stand-ins too


def __getattr__(name: str):
    if name == "metrics":
        return importlib.import_module("t5.evaluation.metrics")
    raise AttributeError(f"module 't5.evaluation' (t5forge.compat) has no attribute {name!r}")
