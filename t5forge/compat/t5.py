"""`import t5`: the package, whose `t5.data` and `t5.evaluation` are t5forge's."""

__path__: list[str] = []  # a package to the import system: its submodules are stand-ins too
