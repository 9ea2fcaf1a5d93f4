"""Writes parameters as a T5X checkpoint, so a model trained or converted here goes back to T5X.

The output is the native T5X format (checkpoints.py, format version 3), as T5X's own
Checkpointer writes it on one host: `checkpoint_<step>/checkpoint` is a flax msgpack file
`{'version': 3, 'optimizer': {'target': <specs>, 'state': {'step': int32}}}` whose parameter
leaves are TensorStore specs, each array a gzip zarr directory `target.<dotted name>` chunked
by T5X's rule (the largest chunk under 64 MiB that divides the shape). T5X's
`INITIAL_CHECKPOINT_PATH` restores it for fine-tuning (its default assignment map starts the
optimizer from scratch), evaluation and inference; `t5x.checkpoints.load_t5x_checkpoint`
reads it too. No optimizer state is written: t5forge's conversions carry parameters only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from t5forge.errors import CheckpointError

VERSION = 3  # bfloat16 kept as bfloat16 in TensorStore (version 2 stored its uint16 bits)
_CHUNK_BYTES = 64 * 1024 * 1024  # T5X's target chunk size


def chunk_shape(shape: tuple[int, ...], itemsize: int) -> list[int]:
    """T5X's chunk rule: start from the whole array and, while a chunk holds more than 64 MiB,
    shrink the currently largest dimension to its next smaller divisor."""
    target = max(1, _CHUNK_BYTES // itemsize)
    divisors = [[d for d in range(1, size + 1) if size % d == 0] for size in shape]
    while int(np.prod([d[-1] for d in divisors])) > target:
        largest = max(range(len(shape)), key=lambda i: (divisors[i][-1], -i))
        divisors[largest].pop()
    return [d[-1] for d in divisors]


def array_spec(name: str, shape: tuple[int, ...], dtype: np.dtype) -> dict:
    """The TensorStore spec T5X records for an array, its path relative to the checkpoint."""
    import tensorstore as ts

    spec = {
        "driver": "zarr",
        "dtype": np.dtype(dtype).name,
        "kvstore": {"driver": "file", "path": name},
        "metadata": {
            "compressor": {"id": "gzip"},
            "shape": list(shape),
            "chunks": chunk_shape(shape, np.dtype(dtype).itemsize),
        },
    }
    return ts.Spec(spec).to_json()


def save_t5x_checkpoint(params: Mapping[str, Any], model_dir: str | Path, step: int = 0) -> Path:
    """Writes `params` (nested dict, T5X names) as `model_dir/checkpoint_<step>`; returns it.

    The directory appears whole or not at all: everything is written under a `.tmp-<time>`
    name, which T5X skips when listing steps, and renamed last, as T5X does.
    """
    model_dir = Path(model_dir)
    final = model_dir / f"checkpoint_{step}"
    if final.exists():
        raise CheckpointError(f"{final} already exists; write to another directory or remove it")
    staging = model_dir / f"{final.name}.tmp-{int(time.time())}"
    staging.mkdir(parents=True)
    specs = _write_arrays(staging, params)
    state = {"version": VERSION, "optimizer": {**specs, "state": {"step": np.int32(step)}}}
    from flax import serialization

    with open(staging / "checkpoint", "wb") as file:
        file.write(serialization.msgpack_serialize(state))
        file.flush()
        os.fsync(file.fileno())
    os.replace(staging, final)
    return final


def _write_arrays(directory: Path, params: Mapping[str, Any]) -> dict:
    """Writes every parameter (as float32, T5X's save dtype) concurrently; returns the
    `{'target': <spec tree>}` the msgpack file records."""
    import tensorstore as ts

    from t5forge.models.param_names import named_leaves, unflatten_like

    specs, writes = {}, []
    for name, leaf in named_leaves(params).items():
        array = np.asarray(leaf, dtype=np.float32)
        spec = array_spec(f"target.{name.replace('/', '.')}", array.shape, array.dtype)
        where = directory / spec["kvstore"]["path"]
        absolute = {**spec, "kvstore": {"driver": "file", "path": str(where) + "/"}}
        writes.append(ts.open(absolute, create=True, open=True).result().write(array))
        specs[name] = spec
    for write in writes:
        write.result()
    return {"target": unflatten_like(params, specs)}
