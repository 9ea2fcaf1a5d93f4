"""`python -m t5forge.convert ...` behaves as `t5forge convert ...` (T5X users run modules)."""

import sys

from t5forge.cli.main import run_command

if __name__ == "__main__":
    sys.exit(run_command("convert", sys.argv[1:]))
