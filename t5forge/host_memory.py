"""Keeps the host memory XLA:CPU frees at the end of a step for the next step.

XLA:CPU allocates a program's temporaries as one block per execution (4.2 GB for a T5 1.1
small train step at batch 8, 512/114) from a worker thread and frees it when the step ends.
glibc serves a block that large from a fresh `mmap` in that thread's arena and unmaps it on
free, so every step faults 4 GB of new pages in and zeroes them: 1.3 million page faults and
~2.5 s of system CPU in a ~7.5 s step on 2 cores. With one arena (the main heap), no `mmap`
for large blocks and no trimming of the heap's top, the block stays in the process and the
next step reuses it: no faults, and the step ~17% shorter (docs/performance.md).

The cost is that the process keeps its peak host memory instead of handing it back between
steps, the way PyTorch's and XLA's device allocators keep theirs (a train step's heap stays at
its first step's size; executions that overlap, one starting before the last one's free
lands, can leave the heap a few temporaries larger). It has to be set before the
worker threads allocate for the first time (a thread keeps the arena it started with), so
`import t5forge` applies it; T5FORGE_HOST_MEMORY=system leaves glibc's defaults.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

ENV = "T5FORGE_HOST_MEMORY"
# mallopt parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8


def keep_freed_memory() -> bool:
    """Sets glibc's malloc to keep large freed blocks for reuse; False where it did nothing
    (not glibc, or T5FORGE_HOST_MEMORY=system)."""
    if os.environ.get(ENV, "").lower() == "system" or not on_glibc():
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    settings = (
        (_M_ARENA_MAX, 1),  # every thread allocates from the main heap (below)
        (_M_MMAP_MAX, 0),  # large blocks come from the heap, not a mapping unmapped on free
        (_M_TRIM_THRESHOLD, -1),  # an int -1 is SIZE_MAX to glibc: never shrink the heap
    )
    return all(libc.mallopt(parameter, value) == 1 for parameter, value in settings)


def on_glibc() -> bool:
    """Whether this process runs on GNU libc, whose malloc the setting is for."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):  # not a GNU system
        return False
