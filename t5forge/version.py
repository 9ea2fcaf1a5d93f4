"""t5forge's version, in a module of its own so the server and the package read it without
importing each other (pyproject.toml repeats it)."""

__version__ = "0.1.0"
