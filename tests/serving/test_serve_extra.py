"""A plain install (no `serve` extra) gets one error line naming the fix, not a traceback."""

import os
import subprocess
import sys

import pytest

# Runs with one package of the extra made unimportable (as if not installed).
PROGRAM = """
import sys
sys.modules[{missing!r}] = None
import t5forge
from t5forge.cli.main import main
from t5forge.errors import T5ForgeError
try:
    main(["serve", "--help"])
except SystemExit as exit_:  # argparse's --help
    assert exit_.code == 0
try:
    t5forge.serve("nowhere")
except T5ForgeError as error:
    print("python:", error)
sys.exit(main(["serve", "--checkpoint", "nowhere"]))
"""


@pytest.mark.parametrize("missing", ["fastapi", "prometheus_client"])
def test_serving_without_the_extra_is_one_line_naming_it(missing):
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(missing=missing)],
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    message = f"serving needs {missing}, which is not installed: pip install 't5forge[serve]'"
    assert done.returncode == 2, done.stderr
    assert "usage: t5forge serve" in done.stdout  # --help works without the extra
    assert f"python: {message}" in done.stdout
    assert done.stderr == f"error: {message}\n"
