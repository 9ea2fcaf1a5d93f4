"""The host CPU's instruction-set flags, for the product forms whose speed on XLA:CPU depends on
the CPU rather than on the backend (AMX's row padding, bfloat16 or float32 widening)."""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache
def cpu_flags() -> frozenset[str]:
    """/proc/cpuinfo's first `flags` (x86) or `Features` (Arm) line; empty where there is none
    (macOS, Windows)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return frozenset()
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def multiplies_bfloat16() -> bool:
    """Whether the CPU has bfloat16 dot-product instructions: x86's AVX-512 BF16 (AMD Zen 4,
    Intel Xeons since Cooper Lake, so every AMX one) or Arm's BF16. Without them XLA:CPU
    converts bfloat16 operands to float32 on every call (AMD Zen 3: an int8 model's generate
    took 1.14-1.17x as long with its products widened to bfloat16 as to float32)."""
    return bool(cpu_flags() & {"avx512_bf16", "bf16"})
