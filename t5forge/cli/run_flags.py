"""The flags `train`, `eval` and `infer` share, then gin: all a run command parses."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import tokenize

from t5forge import compile_cache
from t5forge.cli import absl_flags
from t5forge.errors import ConfigError
from t5forge.gin_config import (  # gin_registry: the names gin files bind
    binding_checks,
    gin_flags,
    gin_internals,
    gin_registry,  # noqa: F401
    gin_syntax,
)
from t5forge.run.task_modules import import_task_modules
from t5forge.training import partitioning

_BOOLEANS = ("gin_strict", "dry_run", "multiprocess_gpu")
# command -> the configurable it calls, whose bindings the checks follow.
ROOTS = {"train": "train", "eval": "evaluate", "infer": "infer"}


def parse_common_flags(rest: list[str], help_text: str, command: str) -> argparse.Namespace | None:
    """Handles the non-gin flags all run commands share; None means `--help` was printed.

    --module_import=MOD (repeatable) imports user task modules; --coordinator_address,
    --process_count and --process_index join a multi-host run (--multiprocess_gpu alone lets
    JAX detect the cluster, --initialization_timeout bounds the wait), as in T5X;
    --tfds_data_dir sets $TFDS_DATA_DIR, where TFDS-backed tasks read prepared datasets,
    before task modules are imported and gin files parsed; infer's --shard_id is T5X's, and
    t5forge runs one shard; --gin_strict makes an unused gin binding an error;
    --compile_cache keeps compiled programs for the next run (t5forge.compile_cache);
    --dry_run (T5X main.py's) stops after the configuration. Boolean flags take absl's
    spellings too (`--multiprocess_gpu=false`, `--nomultiprocess_gpu`).
    """
    parser = argparse.ArgumentParser(
        prog=f"t5forge {command}",
        description=help_text,
        epilog="gin: --gin_file=FILE (repeatable), --gin.NAME=VALUE, --gin_search_paths=DIR,...",
    )
    parser.add_argument(
        "--gin_strict",
        action="store_true",
        help="a gin binding no configurable of this command reads is an error "
        "(exit 2) instead of a warning",
    )
    parser.add_argument("--module_import", action="append", default=[])
    parser.add_argument(
        "--seqio_additional_cache_dirs",
        default="",
        help="comma-separated dirs written by `t5forge cache-tasks` (T5X's flag)",
    )
    parser.add_argument(
        "--tfds_data_dir",
        help="directory of TensorFlow Datasets' prepared data (T5X's flag; sets $TFDS_DATA_DIR)",
    )
    parser.add_argument(
        "--compile_cache", default=compile_cache.default_directory(), help=compile_cache.FLAG_HELP
    )
    parser.add_argument(
        "--dry_run",
        action="store_true",
        help="parse the flags and gin files, check every binding, print the configuration and "
        "stop (T5X main.py's flag)",
    )
    parser.add_argument("--multiprocess_gpu", action="store_true")
    parser.add_argument("--coordinator_address")
    parser.add_argument("--process_count", type=int)
    parser.add_argument("--process_index", type=int)
    parser.add_argument("--initialization_timeout", type=int)
    if command == "infer":
        parser.add_argument(
            "--shard_id", type=int, help="T5X's shard of a sharded inference; t5forge runs one"
        )
    if any(arg in ("-h", "--help") for arg in rest):
        parser.print_help()
        return None
    args, unknown = parser.parse_known_args(absl_flags.absl_booleans(rest, _BOOLEANS))
    if unknown:
        raise ConfigError(f"unknown flag {unknown[0]!r}; see --help")
    if getattr(args, "shard_id", None) not in (None, 0):
        raise ConfigError(
            f"--shard_id={args.shard_id}: t5forge runs inference as one job over the whole "
            "split; drop --shard_id (or pass 0)"
        )
    if args.tfds_data_dir:
        os.environ["TFDS_DATA_DIR"] = args.tfds_data_dir
    compile_cache.use(args.compile_cache)
    if args.multiprocess_gpu or args.coordinator_address or args.process_count is not None:
        partitioning.initialize_distributed(
            args.coordinator_address,
            args.process_count,
            args.process_index,
            args.initialization_timeout,
        )
    import_task_modules(args.module_import)
    from t5forge.data.cache.search_dirs import add_global_cache_dirs

    add_global_cache_dirs([d for d in args.seqio_additional_cache_dirs.split(",") if d])
    return args


def configure_run(argv: list[str], help_text: str, command: str) -> bool:
    """Parses `t5forge <command>`'s flags and gin files and checks every binding (see
    binding_checks); False means there is nothing to run: `--help` was printed, or
    `--dry_run` printed the configuration."""
    flags = gin_flags.split_gin_flags(argv)
    args = parse_common_flags(flags.rest, help_text, command)
    if args is None:
        return False
    gin_syntax.check_flags(flags.bindings)
    try:
        gin_flags.parse_gin(flags)
    except (ConfigError, tokenize.TokenError) as error:
        gin_syntax.check_files(gin_internals.files_read_by_last_parse())
        if isinstance(error, tokenize.TokenError):
            raise ConfigError(f"malformed gin config: {error}") from None
        raise
    binding_checks.check(ROOTS[command], command, flags.bindings, args.gin_strict)
    if args.dry_run:
        import gin

        print(gin.config_str(), end="")
        return False
    return True


@contextlib.contextmanager
def configured_calls():
    """An error raised inside another library's function that a gin file configures (optax's
    warmup_cosine_decay_schedule with decay_steps < 1) is the configuration's: one line naming
    the configurable and its scope, in place of a traceback through gin."""
    try:
        yield
    except (ValueError, TypeError) as error:
        call = re.search(
            r"In call to configurable '([\w.]+)' \(.*?\)(?: in scope '([^']*)')?", str(error)
        )
        if call is None or isinstance(error, ConfigError):
            raise
        name, scope = call.groups()
        if any(m.startswith("t5forge") for m in gin_internals.configurable_modules(name)):
            raise
        where = f"{scope}/{name}" if scope else name
        first = str(error).splitlines()[0]
        raise ConfigError(f"{where}: {first}; fix its gin bindings") from None


def write_gin_config(model_dir) -> None:
    """Records the run's gin configuration as `config.gin` in the model dir, as T5X does."""
    import gin

    from t5forge import storage

    storage.write_atomically(storage.path(model_dir) / "config.gin", gin.config_str())
