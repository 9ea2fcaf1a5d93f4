"""`python -m t5forge.checkpoint ...` behaves as `t5forge checkpoint ...`."""

import sys

from t5forge.cli.main import run_command

if __name__ == "__main__":
    sys.exit(run_command("checkpoint", sys.argv[1:]))
