"""`t5forge cache-tasks`: parses SeqIO's `seqio_cache_tasks` flags and calls
`t5forge.run.cache_tasks`.

Flags follow SeqIO's (`--tasks` names or regexes, `--output_cache_dir`, `--module_import`,
`--min_shards`, `--overwrite`) so existing scripts keep working. With `--runner` the cache is
built by an Apache Beam pipeline (DirectRunner here; Dataflow, Flink, Spark or Prism with
Beam's own options, which pass through).
"""

from __future__ import annotations

import argparse
import os

from t5forge.errors import ConfigError
from t5forge.run.cache_tasks import cache_tasks
from t5forge.run.task_modules import import_task_modules

HELP = "preprocess tasks up to their cache point and write ArrayRecord caches"
EPILOG = """\
Beam: `--runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_threading`
runs on this machine; `--runner=DataflowRunner --project=P --region=R --temp_location=gs://...`,
`--runner=FlinkRunner --flink_master=HOST:8081` or `--runner=SparkRunner` run elsewhere (any
flag this command does not know is handed to Beam). Needs `pip install 't5forge[beam]'`.
"""


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
        "--output_cache_dir", required=True, help="directory that receives <task>/ cache folders"
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
        "--overwrite", action="store_true", help="rebuild splits whose cache is already complete"
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


def main(argv: list[str]) -> int:
    args, beam_args = _parser().parse_known_args(argv)
    if beam_args and not args.runner:
        raise ConfigError(
            f"cache-tasks does not know {beam_args[0]!r}; Beam pipeline options need "
            "--runner (e.g. --runner=DirectRunner), see `t5forge cache-tasks --help`"
        )
    if args.vocab:
        os.environ["T5FORGE_VOCAB"] = args.vocab
    import_task_modules(args.module_import)
    cache_tasks(
        args.tasks,
        args.output_cache_dir,
        splits=[s.strip() for s in args.splits.split(",") if s.strip()] if args.splits else None,
        min_shards=args.min_shards,
        overwrite=args.overwrite,
        runner=args.runner,
        beam_options=beam_args,
        progress=not args.no_progress,
    )
    return 0
