"""JAX's persistent compilation cache, where every t5forge command keeps its compiled programs.

Compiling is most of a command's start-up: T5 1.1 small's train step takes ~50 s on a 2-core
CPU and T5 1.1 large's ~100 s on an H100, and a resumed run, a second evaluation or a restarted
server compiles the very same programs again. With the cache on, they are read back instead.
The commands turn it on by default (`--compile_cache DIR`, '' for off) in one directory per
user. It is JAX's unbounded cache: JAX's bounded one (`jax_compilation_cache_max_size`) keeps
a read-time file beside each entry and fails every write ("Error writing persistent
compilation cache entry ... -atime") in a directory that an unbounded writer also fills, as
JAX_COMPILATION_CACHE_DIR users and earlier t5forge servers do.
"""

from __future__ import annotations

import logging
import os

from t5forge.errors import ConfigError

logger = logging.getLogger(__name__)

ENV = "T5FORGE_COMPILE_CACHE"
FLAG_HELP = (
    "directory of JAX's persistent compilation cache, so that a resumed or repeated run (or "
    "a restarted server) loads its compiled programs instead of compiling them again ('': "
    f"off; default: ${ENV}, else $JAX_COMPILATION_CACHE_DIR, else ~/.cache/t5forge/jax)"
)


def default_directory() -> str:
    """$T5FORGE_COMPILE_CACHE, else JAX's own $JAX_COMPILATION_CACHE_DIR, else
    ~/.cache/t5forge/jax."""
    return os.environ.get(
        ENV,
        os.environ.get(
            "JAX_COMPILATION_CACHE_DIR",
            os.path.join(os.path.expanduser("~"), ".cache", "t5forge", "jax"),
        ),
    )


def use(directory: str) -> None:
    """Points JAX's persistent compilation cache at `directory` ('' turns it off, even where
    $JAX_COMPILATION_CACHE_DIR would turn it on).

    Only programs that took JAX's threshold (a second) to compile are kept: a run's train step
    and decoding loops (a server keeps its programs itself: t5forge/serving/executables.py).
    The setting is process-wide.
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    if directory:
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as error:
            raise ConfigError(
                f"cannot create the compile cache directory {directory} ({error.strerror}); "
                f"pass --compile_cache DIR elsewhere, or --compile_cache '' to turn it off"
            ) from None
        jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_enable_compilation_cache", bool(directory))
    # JAX decides once per process whether its cache is used: without the reset, a cache
    # already used went on reading and writing after it was turned off (and the other way).
    compilation_cache.reset_cache()
    if directory:
        logger.info("compilation cache: %s", directory)
