"""The server's compiled programs kept on disk, so a restart has every shape in seconds.

JAX's persistent compilation cache alone leaves a restart most of its warm-up: to find a
program in that cache JAX traces and lowers it first, and for the demo model's 92 shapes at
batch 8 that was 29 s of a 38 s warm-up (19.5 s tracing, 9 s lowering) against 7.4 s to load
the same executables serialised with `jax.experimental.serialize_executable` (2-core AMD EPYC
under a load of ~8; docs/performance.md). So the engine runs every program through a store: a
program is looked up by its name, static options and argument shapes; on a miss it is lowered
and compiled; after warm-up every executable is written to one file per server identity, and
the next start loads them without tracing anything.

The identity is everything that can change a program while its arguments keep their shapes:
t5forge's code, the model's config and weights' shapes and dtypes, the server settings that
shape programs, jax/jaxlib, XLA flags and JAX's numerics options, the backend and the CPU
(XLA:CPU compiles for the host's instruction set). The file's name is its digest and the file
repeats the identity, so an entry made for anything else is refused, never run; a file or entry
that cannot be read is compiled again; each case is one log line.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import dataclasses
import functools
import hashlib
import json
import logging
import os
import pickle
import platform
import threading
from pathlib import Path
from typing import Any

import jax
import numpy as np

from t5forge.serving import allocator

logger = logging.getLogger(__name__)

# Server settings that never reach a program (network, auth, queueing, refusals): a server
# restarted on another port keeps its executables. Every other field is in the identity.
_SETTINGS_OUTSIDE_PROGRAMS = frozenset(
    {
        "host",
        "port",
        "api_key",
        "max_wait_ms",
        "max_queue",
        "max_items",
        "max_body_bytes",
        "retry_after_s",
        "header_timeout_s",
        "compile_cache",
        "input_length_policy",
        "max_num_beams",
    }
)
# JAX options that change the programs traced from the same code.
_JAX_OPTIONS = (
    "jax_enable_x64",
    "jax_default_matmul_precision",
    "jax_default_prng_impl",
    "jax_threefry_partitionable",
    "jax_numpy_rank_promotion",
)


@functools.cache
def code_digest() -> str:
    """sha256 of t5forge's Python sources (a code change may change a program)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def cpu_description() -> str:
    """The CPU's model and instruction-set flags (/proc/cpuinfo), else what platform knows."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    wanted = ("model name", "flags", "Features", "CPU part")
    fields = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() in wanted:
            fields.setdefault(key.strip(), value.strip())
    if not fields:
        return f"{platform.machine()} {platform.processor()}"
    return "; ".join(f"{key}: {value}" for key, value in sorted(fields.items()))


def server_identity(model, settings, params) -> dict[str, str]:
    """Everything a stored program depends on beyond its argument shapes (see module doc)."""
    import jaxlib

    device = jax.devices()[0]
    weights = [
        (jax.tree_util.keystr(path), tuple(leaf.shape), str(leaf.dtype))
        for path, leaf in jax.tree_util.tree_leaves_with_path(params)
    ]
    program_settings = {
        field.name: getattr(settings, field.name)
        for field in dataclasses.fields(settings)
        if field.name not in _SETTINGS_OUTSIDE_PROGRAMS
    }
    t5x_model = model.t5x_model
    return {
        "t5forge code": code_digest(),
        "jax": f"jax {jax.__version__}, jaxlib {jaxlib.version.__version__}",
        "XLA flags": os.environ.get("XLA_FLAGS", ""),
        "JAX options": repr({name: getattr(jax.config, name, None) for name in _JAX_OPTIONS}),
        "backend": f"{device.platform} {device.client.platform_version} {device.device_kind} "
        f"x{jax.device_count()}",
        "CPU": cpu_description(),
        "model": f"{type(t5x_model).__qualname__} {model.config!r} eos {t5x_model.eos_id} "
        f"max_input_length {model.max_input_length}",
        "weights": hashlib.sha256(repr(weights).encode()).hexdigest(),
        "settings": repr(sorted(program_settings.items())),
    }


def on_device(array, dtype=None) -> jax.Array:
    """A host array (or list) as a program argument, copied to the device without compiling
    anything: `jnp.asarray` of a host array compiles a small program for each new shape in
    this jax, and a server's arguments take every bucket's shape, so each start (restarts
    included, JAX's cache being off) compiled ~45 of them before its warm-up was done."""
    return jax.device_put(np.asarray(array, dtype))


@contextlib.contextmanager
def _persistent_cache_hits():
    """A list that gets an entry for each JAX persistent-cache hit of this thread meanwhile."""
    hits, thread = [], threading.get_ident()

    def record(event: str, **_) -> None:
        if event == "/jax/compilation_cache/cache_hits" and threading.get_ident() == thread:
            hits.append(event)

    jax.monitoring.register_event_listener(record)
    try:
        yield hits
    finally:
        jax.monitoring.unregister_event_listener(record)


def _program_key(name: str, arguments: tuple, options: dict) -> tuple:
    """A program's name, static options and the shapes/dtypes of its arguments after the
    first (the weights, or the slot pool for a program without weights: fixed by the
    identity), as a tuple: looking it up costs a call ~10 us, where formatting it as
    `_signature` took 60-110 us of a step's 0.3-0.5 ms dispatch (demo model, 2-core EPYC).
    A program called with another tree of the same shapes is refused by the executable
    itself, never run on it."""
    shapes = tuple((leaf.shape, leaf.dtype) for leaf in jax.tree.leaves(arguments[1:]))
    return name, tuple(sorted(options.items())), shapes


def _signature(key: tuple) -> str:
    """A `_program_key` as the text that names its program in the store's file."""
    name, options, shapes = key
    return f"{name} {list(options)} {[(shape, str(dtype)) for shape, dtype in shapes]}"


def _without_source_locations(lowered):
    """A program about to be compiled for the store, without its source locations. XLA keeps
    them in every HLO instruction's metadata (op names, files, lines: 40% of a T5 1.1 small
    step program's HLO), and a restart parses them again for each of its programs: T5 1.1
    small's store is 127 MB instead of 180 MB and its 165 programs load with ~6% less CPU
    (10.2 against 10.9 CPU-seconds one after another, 2-core EPYC at a load of ~3). The
    machine code is the same; only profiles of stored programs lose their JAX op names.
    Returns a copy, since jax caches the lowering, or `lowered` itself where jax's lowering is
    not the expected one (private attributes)."""
    from jax.extend.mlir import ir

    computation = getattr(lowered, "_lowering", None)
    module = getattr(computation, "_hlo", None)
    if not isinstance(module, ir.Module):
        return lowered
    with module.context:
        stripped = ir.Module.parse(module.operation.get_asm(enable_debug_info=False))
    computation = copy.copy(computation)
    computation._hlo = stripped
    lowered = copy.copy(lowered)
    lowered._lowering = computation
    return lowered


def _deserialise(entry: tuple[str, tuple]):
    """(serialised form, the program loaded into the backend), or None (with one log line)
    when it cannot be loaded: it is then compiled when first needed."""
    from jax.experimental import serialize_executable

    signature, stored = entry
    try:
        return stored, serialize_executable.deserialize_and_load(*stored)
    except Exception as error:
        name = signature.split(" [", 1)[0]
        logger.warning("stored executable of %s is unusable (%s); compiling it", name, error)
        return None


class ExecutableStore:
    """Compiled programs of one server identity: in memory, and in `directory` between runs
    ('' keeps them in memory only)."""

    def __init__(self, directory: str, identity: dict[str, str]):
        self.identity = identity
        key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
        self.path = Path(directory) / "serving" / f"{key[:32]}.executables" if directory else None
        self._compiled: dict[str, Any] = {}
        self._by_key: dict[tuple, Any] = {}  # the same executables by _program_key
        # From disk, not yet used: each entry's loading, giving (serialised form, executable)
        # or None where it failed.
        self._stored: dict[str, concurrent.futures.Future] = {}
        self._loading: concurrent.futures.ThreadPoolExecutor | None = None
        self._serialised: dict[str, tuple] = {}  # the stored form of those taken from disk
        self._unstorable: set[str] = set()  # read from JAX's persistent cache (see compile)
        # One lock per program: the warm-up's thread and a request's may want the same one at
        # once, and the second waits for the first's compile instead of compiling it again.
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self.loaded = 0  # programs taken from disk
        self.compiled = 0  # programs compiled here

    @classmethod
    def in_memory(cls) -> ExecutableStore:
        """A store kept for this process only (a decoder used outside a server)."""
        return cls("", {})

    def load(self) -> int:
        """Reads the stored programs of this identity, if any, and starts loading them into
        the backend in the order they were compiled; how many were stored. `compile` waits for
        the one it needs, so the warm-up's own work (building each shape's arguments) runs
        beside the loading instead of after it. Loading is most of a restart (T5 1.1 small:
        165 programs, ~60 ms of XLA's parsing and linking each), on `allocator.loading_threads`
        threads: one per core under mimalloc, one under glibc's malloc, whose arena locks two
        loads at once fight over (all 165 of T5 1.1 small's, 2-core AMD EPYC, load ~1: one
        thread 10.2 s wall and 10.2 CPU-s, two 12.9 s and 20.3 CPU-s; mimalloc, two 6.1-6.5 s).
        """
        if self.path is None or not self.path.exists():
            return 0
        try:
            with open(self.path, "rb") as file:
                contents = pickle.load(file)
            identity, programs = contents["identity"], contents["programs"]
        except Exception as error:  # truncated, damaged or foreign: compile instead
            logger.warning(
                "stored executables %s are unreadable (%s); compiling instead", self.path, error
            )
            return 0
        if identity != self.identity:
            changed = sorted(
                k for k in {*identity, *self.identity} if identity.get(k) != self.identity.get(k)
            )
            logger.warning(
                "stored executables %s were made for another %s; compiling instead",
                self.path,
                ", ".join(changed),
            )
            return 0
        self._loading = concurrent.futures.ThreadPoolExecutor(
            allocator.loading_threads(), "executables"
        )
        for entry in programs.items():
            self._stored[entry[0]] = self._loading.submit(_deserialise, entry)
        return len(programs)

    def compile(self, name: str, fn, owner, *arguments, **options):
        """The executable of `fn` for these arguments: already here, loaded from disk, or
        lowered and compiled now."""
        key = _program_key(name, arguments, options)
        executable = self._by_key.get(key)
        if executable is not None:
            return executable
        signature = _signature(key)
        executable = self._compiled.get(signature)
        if executable is not None:
            self._by_key[key] = executable
            return executable
        with self._locks_guard:
            lock = self._locks.setdefault(signature, threading.Lock())
        with lock:
            executable = self._compiled.get(signature)
            if executable is None:
                executable = self._load_or_compile(signature, name, fn, owner, arguments, options)
                self._compiled[signature] = executable
        self._by_key[key] = executable
        return executable

    def _load_or_compile(self, signature: str, name: str, fn, owner, arguments, options):
        loading = self._stored.pop(signature, None)
        stored = loading.result() if loading is not None else None
        if stored is not None:
            self._serialised[signature], executable = stored
            with self._locks_guard:
                self.loaded += 1
            return executable
        static = (owner,) if owner is not None else ()
        with _persistent_cache_hits() as hits:
            lowered = fn.lower(*static, *arguments, **options)
            if self.path is not None:
                lowered = _without_source_locations(lowered)
            executable = lowered.compile()
        if hits:
            # XLA:CPU serialises an executable it loaded without its machine code: the
            # copy loads, then fails when run ("Function ... not found"). Servers turn
            # JAX's cache off (InferenceService); this is for a program that reached it anyway.
            self._unstorable.add(signature)
            logger.info("%s came from JAX's persistent cache; it is not stored", name)
        with self._locks_guard:
            self.compiled += 1
        return executable

    def prepare(self, name: str, fn, owner, *arguments, **options) -> None:
        """Has the executable ready without running it (`run`'s hook for warm-up)."""
        self.compile(name, fn, owner, *arguments, **options)

    def run(self, name: str, fn, owner, *arguments, **options):
        """Runs `fn` through its executable for these arguments. The hook every program
        call site takes: `fn` jitted, `owner` its static first argument (None for a plain
        function), keyword `options` static, `arguments` dynamic, the weights (or the slot pool)
        first."""
        return self.compile(name, fn, owner, *arguments, **options)(*arguments)

    def save(self) -> None:
        """Writes every program of this identity when any was compiled here (atomically: a
        reader sees the old file or the new one), then lets go of the serialised copies read
        from disk (22 MB for the demo model at 2 slots, 44 shapes; the loaded programs stay)."""
        try:
            if self.path is not None and self.compiled:
                self._write()
        finally:
            if self._loading is not None:
                self._loading.shutdown(cancel_futures=True)
            self._stored.clear()
            self._serialised.clear()

    def _write(self) -> None:
        from jax.experimental import serialize_executable

        # Those read from disk are written as they were read (see `compile`).
        programs = {
            signature: self._serialised.get(signature) or serialize_executable.serialize(executable)
            for signature, executable in self._compiled.items()
            if signature not in self._unstorable
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            with open(partial, "wb") as file:
                pickle.dump({"identity": self.identity, "programs": programs}, file)
            os.replace(partial, self.path)
        except OSError as error:
            partial.unlink(missing_ok=True)
            logger.warning("cannot store executables in %s (%s)", self.path, error.strerror)
            return
        logger.info("stored %d executables in %s", len(programs), self.path)
