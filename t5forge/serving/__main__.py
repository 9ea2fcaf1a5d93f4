"""`python -m t5forge.serving ...` behaves as `t5forge serve ...` (T5X users run modules).

It lives here, not in t5forge/serve.py: a module `t5forge.serve` would replace the function
`t5forge.serve` on the package once imported.
"""

import sys

from t5forge.cli.main import run_command

if __name__ == "__main__":
    sys.exit(run_command("serve", sys.argv[1:]))
