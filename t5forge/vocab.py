"""`python -m t5forge.vocab ...` behaves as `t5forge vocab ...` (T5X users run modules)."""

import sys

from t5forge.cli.main import run_command

if __name__ == "__main__":
    sys.exit(run_command("vocab", sys.argv[1:]))
