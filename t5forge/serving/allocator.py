"""The server's memory allocator: mimalloc when it can be had, glibc's malloc otherwise.

A restart spends most of its time in XLA loading stored programs (serving/executables.py),
work that is mostly allocating and freeing small objects. XLA loads each program on a thread
pool of its own, so under glibc's malloc two loads at once fight over its arena locks and are
slower together than one after another; under mimalloc (per-thread heaps) they scale with the
cores. `t5forge serve` therefore re-executes itself once with mimalloc preloaded (the
`cmeel-mimalloc` package ships the library) before anything is loaded;
T5FORGE_ALLOCATOR=system keeps glibc's.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

ENV = "T5FORGE_ALLOCATOR"


def mimalloc_library() -> Path | None:
    """The shared library the cmeel-mimalloc package installs, if it is installed."""
    try:
        library = distribution("cmeel-mimalloc").locate_file("cmeel.prefix/lib/libmimalloc.so.3")
    except PackageNotFoundError:
        return None
    return Path(library) if Path(library).exists() else None


def mimalloc_in_use() -> bool:
    """Whether this process allocates with mimalloc (it is mapped into the process)."""
    try:
        with open("/proc/self/maps") as maps:
            return any("libmimalloc" in line for line in maps)
    except OSError:
        return False


def loading_threads() -> int:
    """How many programs to load at once: one per core under mimalloc, else one."""
    return len(os.sched_getaffinity(0)) if mimalloc_in_use() else 1


def launched_as_serve_command() -> bool:
    """Whether this process is `t5forge serve ...` or `python -m t5forge serve ...` (not a
    process that called the command's main, a test's or a library user's)."""
    program = Path(sys.argv[0])
    command_line = program.name == "t5forge" or (
        program.name == "__main__.py" and program.parent.name == "t5forge"
    )
    return command_line and sys.argv[1:2] == ["serve"]


def reexec_with_mimalloc() -> None:
    """Replaces this `t5forge serve` process (same pid, arguments and environment) with one
    that preloads mimalloc; returns without doing anything where it is in use already or
    unavailable, off Linux, under T5FORGE_ALLOCATOR=system, or in any other process."""
    if sys.platform != "linux" or os.environ.get(ENV, "mimalloc") == "system":
        return
    if not launched_as_serve_command() or mimalloc_in_use():
        return
    library = mimalloc_library()
    if library is None:
        return
    environment = dict(os.environ)
    preload = [part for part in environment.get("LD_PRELOAD", "").split(":") if part]
    environment["LD_PRELOAD"] = ":".join([str(library), *preload])
    environment[ENV] = "system"  # once: if the preload does not take, no second re-execution
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environment)
