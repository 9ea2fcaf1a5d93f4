"""`make bench`: runs the benchmark scripts (all, or those named), then prints one table of
benchmarks/results/*.json (benchmarks/report.py)."""

import argparse
import subprocess
import sys
from pathlib import Path

import report

HERE = Path(__file__).resolve().parent
SCRIPTS = (
    "train_step",
    "moe_train_step",
    "decode",
    "t5gemma_decode",
    "scaling",
    "data_pipeline",
    "serve",
    "cache_tasks",
    "checkpoint_checksums",
    "native_products",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "scripts",
        nargs="*",
        default=list(SCRIPTS),
        metavar="SCRIPT",
        help=f"some of {', '.join(SCRIPTS)} (default: all)",
    )
    args = parser.parse_args()
    unknown = sorted(set(args.scripts) - set(SCRIPTS))
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(SCRIPTS)}")
    failed = []
    for name in args.scripts:
        print(f"=== benchmarks/{name}.py", flush=True)
        if subprocess.run([sys.executable, str(HERE / f"{name}.py")], check=False).returncode:
            failed.append(name)
    print("=== results", flush=True)
    status = report.main([])
    if failed:
        print(
            f"error: {', '.join(failed)} failed; their rows above are from earlier runs",
            file=sys.stderr,
        )
    return 1 if failed else status


if __name__ == "__main__":
    sys.exit(main())
