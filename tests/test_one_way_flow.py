"""Data flows one way (DESIGN.md): the library never reaches into the command line, so its
modules, `t5forge.load(config=<gin file>)` and `t5forge.convert` work without `t5forge.cli`."""

import subprocess
import sys
from pathlib import Path

import t5forge

TINY_GIN = Path(t5forge.__file__).parent / "configs" / "models" / "t5_1_1" / "tiny.gin"

_SCRIPT = """
import importlib, pkgutil, sys
import t5forge

for package in ("data", "models", "training", "run", "interop", "serving", "tasks"):
    path = importlib.import_module(f"t5forge.{package}").__path__
    for module in pkgutil.walk_packages(path, f"t5forge.{package}."):
        if not module.name.endswith(".__main__"):  # `python -m` shims call the CLI on purpose
            importlib.import_module(module.name)
importlib.import_module("t5forge.api")
checkpoint, gin_file, output = sys.argv[1:]
t5forge.load(checkpoint, config=gin_file)
t5forge.convert(checkpoint, output, from_="t5x", to="t5forge", config=gin_file)
print(sorted(name for name in sys.modules if name.startswith("t5forge.cli")))
"""


def test_the_library_never_imports_the_command_line(shared_data, tmp_path):
    checkpoint = shared_data / "t5x_testdata" / "test_t5_tiny.checkpoint_0"
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(checkpoint), str(TINY_GIN), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"
