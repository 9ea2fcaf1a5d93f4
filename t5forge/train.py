"""`python -m t5forge.train ...` behaves as `t5forge train ...` (T5X users run modules)."""

import sys

from t5forge.cli.main import run_command

if __name__ == "__main__":
    sys.exit(run_command("train", sys.argv[1:]))
