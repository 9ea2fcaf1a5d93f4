"""`python -m t5forge.serve ...` behaves as `t5forge serve ...` (T5X users run modules)."""

import sys

from t5forge.cli.main import run_command

if __name__ == "__main__":
    sys.exit(run_command("serve", sys.argv[1:]))
