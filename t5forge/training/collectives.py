"""What a compiled program moves between devices: its collectives, read from XLA's optimized
HLO (`jitted.lower(...).compile().as_text()`).

A layout is checked by what XLA actually emitted, not by the shardings asked for: expert
parallelism, for instance, should show all-to-alls of tokens and no all-gather of expert
kernels (benchmarks/moe_collectives.py, tests/training/test_expert_parallel_multidevice.py).
"""

from __future__ import annotations

import collections
import dataclasses
import re

import numpy as np

KINDS = ("all-gather", "all-to-all", "all-reduce", "reduce-scatter", "collective-permute")
# `%name = <result shape or tuple of shapes> <kind>(` or its asynchronous `<kind>-start(`.
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT )?%\S+ = (?P<shape>.*?) (?P<kind>" + "|".join(KINDS) + r")(?:-start)?\(",
    re.MULTILINE,
)
_ARRAY = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]")
_SOURCE = re.compile(r'op_name="([^"]*)"')


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective instruction: its kind, result arrays (`f32[4,8,16]`), their bytes on one
    device, and the JAX operation it came from (its op_name, '' when XLA kept none)."""

    kind: str
    arrays: tuple[str, ...]
    bytes: int
    source: str


def _array_bytes(dtype: str, dims: str) -> int:
    """Bytes of one array: its type's bits (f32, bf16, f8e4m3fn, c64; pred as 8) over 8, at
    least one per element."""
    bits = re.search(r"\d+", dtype)
    width = max(int(bits[0]) // 8, 1) if bits else 1
    return width * int(np.prod([int(d) for d in dims.split(",") if d]))


def collectives(hlo_text: str) -> list[Collective]:
    """Every collective in an optimized HLO module's text, in order."""
    found = []
    for match in _INSTRUCTION.finditer(hlo_text):
        arrays = _ARRAY.findall(match["shape"])
        line_end = hlo_text.find("\n", match.end())
        source = _SOURCE.search(hlo_text, match.end(), None if line_end < 0 else line_end)
        found.append(
            Collective(
                match["kind"],
                tuple(f"{dtype}[{dims}]" for dtype, dims in arrays),
                sum(_array_bytes(dtype, dims) for dtype, dims in arrays),
                source[1] if source else "",
            )
        )
    return found


def summary(found: list[Collective]) -> dict[str, tuple[int, int]]:
    """{kind: (how many, their bytes on one device)} for each kind present."""
    counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for collective in found:
        counts[collective.kind][0] += 1
        counts[collective.kind][1] += collective.bytes
    return {kind: tuple(counts[kind]) for kind in KINDS if kind in counts}
