"""`python -m t5forge.infer ...` behaves as `t5forge infer ...` (T5X users run modules)."""

import sys

from t5forge.cli.main import run_command

if __name__ == "__main__":
    sys.exit(run_command("infer", sys.argv[1:]))
