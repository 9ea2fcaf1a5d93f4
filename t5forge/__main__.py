"""`python -m t5forge <command> ...` behaves as `t5forge <command> ...`.

One module entry point for every command: a module per command (`t5forge/train.py`) would
replace the function `t5forge.train` on the package once something imported it.
"""

import sys

from t5forge.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
