"""`make bench`: runs every benchmark script here, each printing its ratio against a named peer."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    failures = 0
    for script in sorted(HERE.glob("*.py")):
        if script.name == Path(__file__).name:
            continue
        print(f"=== {script.name}", flush=True)
        failures += subprocess.run([sys.executable, str(script)], check=False).returncode != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
