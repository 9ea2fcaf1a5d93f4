"""`t5forge cache-tasks`: parses SeqIO's `seqio_cache_tasks` flags and calls
`t5forge.run.cache_tasks`.

Flags follow SeqIO's `seqio_cache_tasks` (`--tasks` names or regexes, `--excluded_tasks`,
`--output_cache_dir`, `--tasks_additional_cache_dirs`, `--ignore_other_caches`,
`--module_import`, `--min_shards`, `--max_shards`, `--overwrite`, `--base_seed`,
`--enable_char_counts`, `--tfds_data_dir`, `--pipeline_options`, `--output_format`,
`--preserve_random_access`) so existing scripts keep working. With `--runner` (or
`--pipeline_options`) the cache is built by an Apache Beam pipeline (DirectRunner here;
Dataflow, Flink, Spark or Prism with Beam's own options, which pass through).
"""

from __future__ import annotations

import argparse
import os
import sys

from t5forge.cli import absl_flags
from t5forge.cli.commands import COMMANDS
from t5forge.errors import ConfigError
from t5forge.run.cache_tasks import cache_tasks
from t5forge.run.task_modules import import_task_modules

HELP = COMMANDS["cache-tasks"].summary
EPILOG = """\
Beam: `--runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_threading`
runs on this machine; `--runner=DataflowRunner --project=P --region=R --temp_location=gs://...`,
`--runner=FlinkRunner --flink_master=HOST:8081` or `--runner=SparkRunner` run elsewhere (any
flag this command does not know is handed to Beam; SeqIO's
`--pipeline_options=--runner=DirectRunner,--direct_num_workers=2` works too). Needs
`pip install 't5forge[beam]'`.
"""
_BOOLEANS = ("overwrite", "ignore_other_caches", "enable_char_counts", "preserve_random_access")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="t5forge cache-tasks",
        description=HELP,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # a Beam option must never be taken for an abbreviation
    )
    parser.add_argument(
        "--tasks",
        action="append",
        required=True,
        help="comma-separated task or mixture names, or regexes matched against the whole "
        "registered name, e.g. 'glue_.*' (repeatable)",
    )
    parser.add_argument(
        "--excluded_tasks",
        action="append",
        default=[],
        help="comma-separated regexes of task names to leave out (repeatable)",
    )
    parser.add_argument(
        "--output_cache_dir", required=True, help="directory that receives <task>/ cache folders"
    )
    parser.add_argument(
        "--tasks_additional_cache_dirs",
        default="",
        help="comma-separated directories of existing caches: a split complete there is not "
        "written again",
    )
    parser.add_argument(
        "--ignore_other_caches",
        action="store_true",
        help="write every split here even when another cache directory holds it",
    )
    parser.add_argument(
        "--module_import",
        action="append",
        default=[],
        help="module that registers the tasks (repeatable)",
    )
    parser.add_argument(
        "--splits", default=None, help="comma-separated splits (default: every split of each task)"
    )
    parser.add_argument(
        "--min_shards", type=int, default=1, help="write at least this many shards per split"
    )
    parser.add_argument(
        "--max_shards", type=int, default=0, help="write at most this many shards (0: no cap)"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="rebuild splits whose cache in --output_cache_dir is already complete",
    )
    parser.add_argument(
        "--base_seed",
        type=int,
        default=None,
        help="seed of the random steps before the cache point (default 0, as an uncached run's "
        "seed; -1 also means 0)",
    )
    parser.add_argument(
        "--enable_char_counts",
        action="store_true",
        help="also count the characters each feature decodes to (<feature>_chars in stats)",
    )
    parser.add_argument(
        "--tfds_data_dir", help="directory of TensorFlow Datasets' prepared data ($TFDS_DATA_DIR)"
    )
    parser.add_argument(
        "--pipeline_options",
        default="",
        help="SeqIO's comma-separated Beam options, e.g. --runner=DirectRunner,--direct_num_workers=2",
    )
    parser.add_argument(
        "--output_format",
        choices=("arrayrecord", "tfrecord"),
        default="arrayrecord",
        help="t5forge writes ArrayRecord, what its readers read (tfrecord: a warning)",
    )
    parser.add_argument(
        "--preserve_random_access",
        action="store_true",
        help="always so: t5forge's shards keep one record per chunk",
    )
    parser.add_argument(
        "--runner",
        help="build the caches with this Apache Beam runner (DirectRunner, DataflowRunner, "
        "FlinkRunner, SparkRunner, PrismRunner); default: one local process",
    )
    parser.add_argument(
        "--vocab", help="SentencePiece model for built-in tasks (default: $T5FORGE_VOCAB)"
    )
    parser.add_argument("--no_progress", action="store_true", help="hide the progress bars")
    return parser


def _runner_and_beam_options(args, beam_args: list[str]) -> tuple[str | None, list[str]]:
    """The Beam runner, if any, and the options handed to Beam: --runner, else the one SeqIO's
    --pipeline_options names, else DirectRunner when --pipeline_options is given (SeqIO's
    default); the other options of --pipeline_options, then the flags this command does not
    know."""
    options = [o.strip() for o in args.pipeline_options.split(",") if o.strip()]
    runners = [args.runner] if args.runner else []
    runners += [o.partition("=")[2] for o in options if o.startswith("--runner=")]
    runners += ["DirectRunner"] if options else []
    beam_options = [o for o in options if not o.startswith("--runner=")] + beam_args
    if beam_options and not runners:
        raise ConfigError(
            f"cache-tasks does not know {beam_options[0]!r}; Beam pipeline options need "
            "--runner (e.g. --runner=DirectRunner), see `t5forge cache-tasks --help`"
        )
    return (runners[0] if runners else None), beam_options


def main(argv: list[str]) -> int:
    args, beam_args = _parser().parse_known_args(absl_flags.absl_booleans(argv, _BOOLEANS))
    runner, beam_options = _runner_and_beam_options(args, beam_args)
    if args.output_format == "tfrecord":
        print(
            "warning: --output_format=tfrecord: t5forge writes its caches as ArrayRecord, which "
            "its readers read; writing ArrayRecord",
            file=sys.stderr,
        )
    if args.vocab:
        os.environ["T5FORGE_VOCAB"] = args.vocab
    if args.tfds_data_dir:
        os.environ["TFDS_DATA_DIR"] = args.tfds_data_dir
    import_task_modules(args.module_import)
    cache_tasks(
        args.tasks,
        args.output_cache_dir,
        splits=[s.strip() for s in args.splits.split(",") if s.strip()] if args.splits else None,
        excluded_tasks=args.excluded_tasks,
        other_cache_dirs=[d for d in args.tasks_additional_cache_dirs.split(",") if d],
        ignore_other_caches=args.ignore_other_caches,
        min_shards=args.min_shards,
        max_shards=args.max_shards,
        overwrite=args.overwrite,
        seed=0 if args.base_seed in (None, -1) else args.base_seed,
        char_counts=args.enable_char_counts,
        runner=runner,
        beam_options=beam_options,
        progress=not args.no_progress,
    )
    return 0
