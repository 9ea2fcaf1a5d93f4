"""`python -m t5forge.eval ...` behaves as `t5forge eval ...` (T5X users run modules)."""

import sys

from t5forge.cli.main import run_command

if __name__ == "__main__":
    sys.exit(run_command("evaluate", sys.argv[1:]))
