"""Fresh params that compile quickly on a GPU: each threefry draw as one kernel call.

A network's init draws every parameter with threefry, and XLA writes each draw out as fusions
of its own: T5 1.1 large's init is 5,673 fusions (45 MB of optimized HLO; 205 s to compile on
a 2-core CPU), and on an H200 the train state took 223 s to be ready, nearly all of it compiling
(13 s once JAX's persistent cache held the programs; issue 42's lease of 2026-11-27). JAX can
lower threefry on GPUs to one kernel call per draw instead (`jax_threefry_gpu_kernel_lowering`):
the same algorithm and bits in a far smaller program. Other backends ignore the setting.
"""

from __future__ import annotations

import contextlib

import jax

_SETTING = "jax_threefry_gpu_kernel_lowering"


@contextlib.contextmanager
def compact_random_draws():
    """Traces and compiles inside the block lower threefry to GPU kernel calls. Only on a GPU
    is the global setting touched (other threads may be tracing: a server's), and a jax without
    it keeps its own lowering."""
    previous = getattr(jax.config, _SETTING, None)
    if previous is None or jax.default_backend() != "gpu":  # elsewhere the setting does nothing
        yield
        return
    jax.config.update(_SETTING, True)
    try:
        yield
    finally:
        jax.config.update(_SETTING, previous)
