"""Command line: one module per command, dispatched by `t5forge <command>`."""
