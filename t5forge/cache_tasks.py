"""`python -m t5forge.cache_tasks ...`: the same as `t5forge cache-tasks ...`."""

import sys

from t5forge.cli.main import run_command

if __name__ == "__main__":
    sys.exit(run_command("cache_tasks", sys.argv[1:]))
