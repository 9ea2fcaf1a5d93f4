"""Where tasks look for caches written by `t5forge cache-tasks` (SeqIO's global cache dirs).

One process-wide list, set by `--seqio_additional_cache_dirs` (T5X's flag) or by a task module;
a task with `use_cached=True` reads the first of these directories that holds its cache.
"""

from __future__ import annotations

from collections.abc import Iterable

_GLOBAL_CACHE_DIRS: list[str] = []


def add_global_cache_dirs(dirs: str | Iterable[str]) -> None:
    """Adds directories searched for task caches written by `t5forge cache-tasks`."""
    for d in [dirs] if isinstance(dirs, str) else dirs:
        if str(d) not in _GLOBAL_CACHE_DIRS:
            _GLOBAL_CACHE_DIRS.append(str(d))


def set_global_cache_dirs(dirs: Iterable[str]) -> None:
    """Replaces the list (tests and tools that need a known state)."""
    _GLOBAL_CACHE_DIRS[:] = [str(d) for d in dirs]


def get_global_cache_dirs() -> list[str]:
    return list(_GLOBAL_CACHE_DIRS)
